"""Evidence about one candidate tree: its outputs on the frozen corpus, their quality against the original
baseline and its speed against the best. Each part is computed once, on first request, from worker
processes; what has been computed is exposed read-only (`quality_result`, `performance_result`, `crash`).

Used by the quality and perf tests both inside an experiment and in plain `pytest -m quality|perf` runs. The
workers come from the session's launcher (loop/workers/launch.py); the candidate's worker lifecycle is
`CandidateWorkers` (loop/candidate.py); the timed comparison's inputs are loop/speed/timing.py's. This class keeps
the crash record and the run folder's quality and perf records.
"""

from __future__ import annotations

import time
from pathlib import Path

from dit_ar_contract.config import WorkloadSpec
from dit_ar_contract.errors import CandidateCrash
from quality_suite import task_metrics
from quality_suite.artifacts import load_cases
from quality_suite.assessment import QualityAssessment
from quality_suite.corpora import Case, load_corpus

from ..state.baseline import BaselineSummary, cases_dir
from ..state.files import write_record
from ..state.perf_record import PerfRecord
from ..state.runs import RunPaths
from ..state.session import Session
from ..state.timed_quality import TimedQuality
from .candidate import CandidateWorkers, PhaseClock, further_inputs
from .guards.checks import check_case_budget
from .quality import assess as quality
from .quality import reuse, timed
from .quality.generation import CandidateRun
from .quality.parent import parent_outputs
from .speed import timing
from .speed.progress import TimingProgress
from .workers.launch import launcher_for, memory_budget
from .workers.live import Live


class Evidence:
    """Lazily computed, read-only evidence about the tree at `session.root` (the candidate)."""

    def __init__(self, session: Session, declared_class: str, run_dir: Path, best_root: Path | None = None,
                 prefetch_best: bool = False, candidate_root: Path | None = None, sandboxed: bool = True,
                 case_ids: set[str] | None = None):
        self.session, self.declared_class, self.run_dir = session, declared_class, run_dir
        self.run, self.best_root = RunPaths(run_dir), best_root
        self.candidate_root = candidate_root or session.root  # a clean checkout of HEAD in experiments
        self.prefetch_best = prefetch_best  # boot the best side during the quality run (experiments time it next)
        self.sandboxed = sandboxed
        self.launcher = launcher_for(session, sandboxed)
        self.key = session.record.seed_key if session.record else ""
        self.case_ids = case_ids  # plain runs of a few cases generate only those
        self.progress: TimingProgress | None = None  # set by the face that shows it
        self.live: Live | None = None  # the phases as they happen (set by the face that shows them)
        self._crash: CandidateCrash | None = None
        self._run: CandidateRun | None = None
        self._quality: QualityAssessment | None = None
        self._perf: PerfRecord | None = None
        self._timed: TimedQuality | None = None  # the timed rounds judged on the task (loop/quality/timed.py)
        self._baseline: BaselineSummary | None = None
        self.clock = PhaseClock()
        self.reuse = reuse.Reused()  # whether the quality judging was the best's stored one, and why
        self.memory = memory_budget(session)
        self.workers = CandidateWorkers(session, self.launcher, self.run, self.candidate_root, best_root,
                                        prefetch_best, self.memory, self.spec, self.key)

    @property
    def seconds(self) -> dict[str, float]:
        """Where the evidence's wall time went, by phase (worker start, corpus, metrics, timing parts)."""
        return dict(self.clock.seconds)

    @property
    def crash(self) -> CandidateCrash | None:
        return self._crash

    @property
    def quality_result(self) -> QualityAssessment | None:
        return self._quality

    @property
    def performance_result(self) -> PerfRecord | None:
        return self._perf

    @property
    def timed_quality(self) -> TimedQuality | None:
        return self._timed

    @property
    def effective_class(self) -> str:
        return self._quality.effective_class if self._quality else self.declared_class

    # -- inputs ---------------------------------------------------------------------------------
    def cases(self) -> list[Case]:
        cases = load_corpus(self.session.root / self.session.lane.corpus)
        return [c for c in cases if self.case_ids is None or c.id in self.case_ids]

    def baseline_cases(self, cases: list[Case]) -> tuple[dict, dict]:
        """The verified baseline's images and latents of `cases` (verified first)."""
        return self.baseline() and load_cases(cases_dir(self.session.baseline_dir), cases)

    def baseline(self) -> BaselineSummary:
        if self._baseline is None:
            self._baseline = self.session.verified_baseline()
        return self._baseline

    # -- crash bookkeeping ----------------------------------------------------------------------
    def record_crash(self, exc: CandidateCrash) -> None:
        """Remember a crash wherever it happened (the verdict is CRASH) and write crash.txt."""
        if self._crash is None:
            self._crash = exc
            self.run.write_crash(str(exc), exc.details)

    def _raise_if_crashed(self) -> None:
        if self._crash is not None:
            raise self._crash

    # -- the candidate's quality run (loop/candidate.py) -------------------------------------------
    def candidate(self) -> CandidateRun:
        """Build and run the candidate's pipeline on the corpus in a worker (once); its crash is recorded."""
        self._raise_if_crashed()
        if self._run is None:
            try:
                self._run = self.workers.quality_run(self.cases(), self.clock, self.live)
            except CandidateCrash as exc:
                self.record_crash(exc)
                raise
        return self._run

    def _phase(self, text: str) -> None:
        if self.live is not None:
            self.live.phase(text)

    def spec(self, side_root: Path) -> WorkloadSpec:
        """The workload for a side's worker: the path the worker sees its tree at, weights from the project."""
        return self.session.lane.workload(self.launcher.model_root(side_root), self.session.root)

    def close(self) -> None:
        """Stop workers that are still up (a discard before timing leaves the first pair unused)."""
        self.workers.close()

    # -- quality --------------------------------------------------------------------------------
    def quality(self) -> QualityAssessment:
        if self._quality is None:
            self._quality = self._assess()
            write_record(self.run.quality, self._quality.as_dict())
        return self._quality

    def _assess(self) -> QualityAssessment:
        cases, run = self.cases(), self.candidate()
        ref = quality.reference(self.session, self.baseline(), cases)
        self._phase("quality: metrics and gates against the baseline")
        t, whole = time.perf_counter(), self.case_ids is None
        self.reuse = reuse.best_judging(self.session, self.launcher, self.best_root, self.declared_class, run, whole,
                                        ref.outputs.evidence)
        parent = whole and parent_outputs(self.session, self.launcher, self.best_root, cases, self.run, self.spec,
                                          self.live) or None
        self.reuse = reuse.confirm_own_change(self.reuse, self.declared_class, run, parent, self.session.lane.quality,
                                              ref.envelope)
        with further_inputs(self.workers, cases, self.live, self.reuse.assessment is None) as inputs:
            result = quality.assess_run(self.session, self.declared_class, run, ref, cases, self.run, whole,
                                        inputs=inputs, reused=self.reuse.assessment, parent=parent)
        self.clock.spent("quality_metrics", t)
        return result

    def check_metrics_available(self) -> None:
        """Refuse before anything runs when a required metric cannot be computed here, or when the lane's case
        budget cannot pass the candidate's class (guards/checks.py `check_case_budget`)."""
        task_metrics.check_available(self.session.lane.task_metrics, self.session.lane.quality, self.session.root)
        check_case_budget(self.session, self.declared_class, self.baseline().task_metrics)

    # -- performance (loop/speed/timing.py) ---------------------------------------------------------------
    def performance(self) -> PerfRecord:
        """Interleaved A/B timing of the candidate against the best worktree (after the quality run: the
        timed outputs are checked under the class the quality run found, and for an approximate or quantization
        class scored on the lane's task metrics: loop/quality/timed.py)."""
        self._raise_if_crashed()
        if self._perf is None:
            if self.best_root is None:
                raise RuntimeError("no best worktree to compare with")
            outputs = timed.collector(self.session, self.quality().effective_class, self.cases())
            self._perf = timed_comparison(self, outputs)
            self._timed = judged_timing(self, outputs)
            for phase, spent in self._perf.seconds.items():
                self.clock.seconds[f"timing_{phase}"] = spent
            write_record(self.run.perf, self._perf.to_dict())
            timing.learn_noise(self.session, self.run_dir, self._perf)
        return self._perf


def roofline_ms(evidence: Evidence) -> float | None:
    """The fastest a batch could possibly run on this device (timing.roofline_ms)."""
    rows = evidence.candidate().outputs.denoiser_rows_per_image
    return timing.roofline_ms(evidence.baseline(), rows, evidence.session.lane.gpus, evidence.effective_class)


def timed_comparison(evidence: Evidence, outputs: timed.TimedCases | None) -> PerfRecord:
    """The timing of the candidate against the best, every round's outputs checked (and handed to `outputs`);
    a crash is the candidate's, recorded."""
    rows = evidence.candidate().outputs.denoiser_rows_per_image  # the judged run's rows (timing.round_check)
    check = timing.round_check(evidence.quality(), evidence.baseline().envelope, evidence.session, rows)
    if evidence.live is not None:
        evidence.live.phase("speed: the candidate against the best in fresh worker pairs, interleaved rounds")
    plan = evidence.workers.plan(tuple(c.prompt for c in evidence.cases()), roofline_ms(evidence), check,
                                 timing.offset_bound(evidence.session), outputs)
    try:
        return evidence.workers.measure(plan, evidence.progress, evidence.clock)
    except CandidateCrash as exc:
        evidence.record_crash(exc)
        raise


def judged_timing(evidence: Evidence, outputs: timed.TimedCases | None) -> TimedQuality | None:
    """What was timed, judged on the task (None: not collected, or no round ran)."""
    if outputs is None or not outputs.cases:
        return None
    t = time.perf_counter()
    try:
        return timed.judge(evidence.session, outputs, evidence.effective_class, evidence.baseline(),
                           len(evidence.cases()))
    finally:
        evidence.clock.spent("timed_quality", t)
