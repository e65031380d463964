"""The cases the paired task-score tests add when undecided, and the outputs and scores they compare.

Beyond the corpus a lane's tests take, in order, its holdout cases and then replicas of the corpus cases under
further derived seeds (quality_suite.corpora.replicas), all keyed by the session's secret like the corpus, up to
the case budget (`quality.noninferiority.case_budget_multiple` x the corpus). At baseline time the harness
generates the baseline's outputs of all of them and stores their per-case task scores in the baseline folder
(`task_cases.safetensors`, under its manifest), with the metrics' resolution: what the baseline's benign reruns
and its images rounded to 8 bits do to each score. In an experiment, `ExtensionSupply` generates the candidate's
(and, for a quantization after a keep that moved the outputs, the parent's) outputs of the next cases in worker
processes of the harness and scores them; `task_inputs` hands all of it to the assessment.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dit_ar_contract.classes import ChangeClass
from dit_ar_contract.config import WorkloadSpec
from quality_suite import margin_spread, task_metrics, task_tests
from quality_suite.assessment import TaskInputs
from quality_suite.case_scores import CASE_SCORES, CaseScores
from quality_suite.corpora import Case, replicas

from ...state.session import Session
from ...worker.client import WorkerLauncher, WorkerProcess
from ..workers.live import Live
from . import holdout
from .generation import CorpusOutputs, generate_corpus, quality_gaps


def budget(session: Session, corpus: list[Case]) -> int:
    """The most cases a test may use on this lane."""
    return task_tests.design(session.lane.quality, len(corpus)).max_cases


def extension_cases(session: Session, corpus: list[Case]) -> list[Case]:
    """The holdout, then replicas of the corpus cases, up to the case budget (none without task metrics)."""
    if not session.lane.task_metrics:
        return []
    room = budget(session, corpus) - len(corpus)
    held = (holdout.holdout_cases(session) or [])[:room]
    return held + replicas(corpus, room - len(held))


def scores_of(session: Session, images: dict[str, torch.Tensor], cases: list[Case]) -> CaseScores:
    """Per-case task scores of `images` (the lane's metrics, computed by the harness)."""
    lane = session.lane
    if not cases or not lane.task_metrics:
        return CaseScores()
    return CaseScores.of(task_metrics.compute(lane.task_metrics, images, cases, session.root, lane.quality))


def rounded_to_8_bits(images: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The images as an 8-bit file holds them: a harmless change the harness applies itself."""
    return {cid: (img.float().clamp(0, 1) * 255).round() / 255 for cid, img in images.items()}


def resolution(session: Session, cases: list[Case], default: CorpusOutputs,
               reruns: list[CaseScores]) -> dict[str, float]:
    """Per metric: the largest degradation the benign reruns and the 8-bit rounding show, times the exact
    envelope multiple, never below the score's float resolution (quality_suite.task_tests.resolution)."""
    lane = session.lane
    if not lane.task_metrics:
        return {}
    scored = task_metrics.compute(lane.task_metrics, default.images, cases, session.root, lane.quality)
    reference = CaseScores.of(scored)
    harmless = [*reruns, scores_of(session, rounded_to_8_bits(default.images), cases)]
    return task_tests.resolution(reference, harmless, {k: v.value for k, v in scored.items()},
                                 lane.quality.exact.envelope_multiple)


def store_baseline_scores(session: Session, worker: WorkerProcess, corpus: list[Case], default: CorpusOutputs,
                          held: tuple[list[Case], CorpusOutputs] | None, live: Live | None,
                          resolutions: dict[str, float]) -> dict[str, dict[str, dict[str, float]]]:
    """Generate the baseline's replicas, score every case the tests may use and store the scores; return the
    spread floors measured on the same images (at_margin_spread)."""
    if not session.lane.task_metrics:
        return {}
    extra = extension_cases(session, corpus)
    held_cases, held_outputs = held if held else ([], CorpusOutputs())
    held_ids = {c.id for c in held_cases}
    more = [c for c in extra if c.id not in held_ids]
    lane = session.lane
    outputs = generate_corpus(worker, more, lane.batch, session.started.seed_key, lane.resolution,
                              desc="task-score cases beyond the corpus", live=live) if more else CorpusOutputs()
    scores = scores_of(session, default.images, corpus)
    scores = scores.plus(scores_of(session, held_outputs.images, [c for c in extra if c.id in held_ids]))
    scores = scores.plus(scores_of(session, outputs.images, more))
    session.baseline_dir.mkdir(parents=True, exist_ok=True)
    if extra:
        scores.save(session.baseline_dir / CASE_SCORES)
    images = {**default.images, **held_outputs.images, **outputs.images}
    return at_margin_spread(session, images, corpus + extra, len(corpus), resolutions, live)


def at_margin_spread(session: Session, images: dict[str, torch.Tensor], cases: list[Case], corpus_size: int,
                     resolutions: dict[str, float], live: Live | None) -> dict[str, dict[str, dict[str, float]]]:
    """Per margin source (approximate margin, resolution), per metric: the spread of the degradation of the
    baseline's images blended at that margin (quality_suite/margin_spread.py): the tests' spread floor."""
    lane = session.lane
    task_base = {k: v.value for k, v in task_metrics.compute(lane.task_metrics, images, cases[:corpus_size],
                                                              session.root, lane.quality).items()}
    targets: dict[str, dict[str, float]] = {}
    for cls in (ChangeClass.APPROXIMATE, ChangeClass.QUANTIZATION):
        for name, (margin, source) in task_tests.margins(cls, lane.quality, task_base, resolutions).items():
            targets.setdefault(source, {})[name] = margin
    per_case = task_metrics.per_case_only(lane.task_metrics)  # set metrics get no floor (margin_spread.measure)
    if not per_case:
        return {source: {} for source in targets}
    if live is not None:
        live.phase("the spread of a degradation at the margin (blends of the baseline's images)")

    def score(imgs: dict[str, torch.Tensor]) -> CaseScores:
        return CaseScores.of(task_metrics.compute(per_case, imgs, cases, session.root, lane.quality))

    spreads = margin_spread.measure(images, cases, corpus_size, score,
                                    {src: {k: v for k, v in m.items() if k in per_case} for src, m in targets.items()},
                                    lane.quality.exact.envelope_multiple)
    return margin_spread.as_record(spreads)


def stored_baseline_scores(session: Session) -> CaseScores | None:
    path = session.baseline_dir / CASE_SCORES
    return CaseScores.load(path) if path.is_file() else None


@dataclass
class OutputSource:
    """One side's outputs of further cases: a worker already up (the first timing pair's), else one the source
    starts (kept for the next block on a CPU lane, closed after each block on a GPU lane, where two more
    workers may not fit)."""

    session: Session
    launcher: WorkerLauncher
    name: str
    root: Path
    spec: WorkloadSpec
    log: Path
    running: WorkerProcess | None = None
    candidate: bool = False  # the candidate's requests come with the timed rounds' gaps
    key: str = ""  # the requests' key ("": the session's secret; the confirmation's fresh cases have their own)
    desc: str = ""  # what the live view calls its generation
    _own: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def generate(self, cases: list[Case], live: Live | None) -> CorpusOutputs:
        lane = self.session.lane
        worker = self.running or self._start()
        gaps = quality_gaps(self.session) if self.candidate else None
        try:
            return generate_corpus(worker, cases, lane.batch, self.key or self.session.started.seed_key,
                                   lane.resolution, desc=self.desc or f"quality: {self.name} on further cases",
                                   live=live, gaps=gaps)
        finally:
            if self.running is None and lane.is_cuda:
                self.close()

    def _start(self) -> WorkerProcess:
        worker = self._own.enter_context(self.launcher.worker(self.name, self.root, self.log))
        worker.request("build", spec=self.spec)
        if not self.session.lane.is_cuda:
            self.running = worker
        return worker

    def close(self) -> None:
        self._own.close()
        self._own = contextlib.ExitStack()


@dataclass
class ExtensionSupply:
    """The further cases of one experiment's tests (quality_suite.task_tests.CaseSupply)."""

    session: Session
    cases: list[Case]
    baseline: CaseScores
    cand: OutputSource
    parent: OutputSource | None
    live: Live | None = None
    used: int = 0

    def available(self) -> int:
        return len(self.cases) - self.used

    def take(self, count: int, references: tuple[str, ...]) -> task_tests.Block:
        block = self.cases[self.used:self.used + count]
        self.used += len(block)
        cand = scores_of(self.session, self.cand.generate(block, self.live).images, block)
        refs = {task_tests.BASELINE: self.baseline.select([c.id for c in block])}
        if task_tests.PARENT in references and self.parent is not None:
            refs[task_tests.PARENT] = scores_of(self.session, self.parent.generate(block, self.live).images, block)
        return task_tests.Block(cand, refs)


def parent_moved(session: Session) -> bool:
    """Whether the current best's outputs are not the baseline's (a numerical, approximate or quantization keep):
    then a quantization must show its tolerance claim against it too."""
    best = session.best()
    record = session.record
    if best is None or (record is not None and best.commit == record.baseline_commit):
        return False
    return ChangeClass.from_word(best.effective_class) is not ChangeClass.EXACT


def task_inputs(session: Session, corpus: list[Case], cand: OutputSource, parent: OutputSource | None,
                live: Live | None) -> TaskInputs:
    """What the assessment's tests compare: the baseline's stored scores, the parent's (when it moved), further
    cases (those the baseline stored). The caller closes the sources after the assessment."""
    stored = stored_baseline_scores(session) or CaseScores()
    have = stored.all_ids()
    base = stored.select([c.id for c in corpus]) if {c.id for c in corpus} <= have else None
    extra = [c for c in extension_cases(session, corpus) if c.id in have]
    source = parent if parent is not None and parent_moved(session) else None
    supply = ExtensionSupply(session, extra, stored, cand, source, live) if extra else None

    def parent_scores() -> CaseScores:
        assert source is not None
        return scores_of(session, source.generate(corpus, live).images, corpus)

    return TaskInputs(base, parent_scores if source is not None else None, supply)
