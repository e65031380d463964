"""`dit-ar calibrate --quality`: the task-score tests' error rates on the session's lane, measured.

The harness generates a pool on the lane with the current best's tree (blocks: the corpus again and again under
fresh seeds of its own, not the session's), applies known degradations to the images itself (each image blended
with another case's image, the weight set so that a metric's degradation is 0.5, 1, 2 and 5 times its margin or
its resolution) and known harmless changes (the pool generated again one case per batch, its images rounded to 8
bits), and runs the gate's own sequential tests on simulated sessions drawn from the pool
(quality_suite/pool_sessions.py: task_tests.run, hence judge_case_scores). It prints, per per-case metric and class,
how often each change passed, and writes the table to .autoresearch/quality-calibration-<lane>.json; a set metric is
reported, not gated, and gets no rows. Nothing of model_under_test is edited.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from dit_ar_contract.classes import ChangeClass
from dit_ar_contract.errors import Refused
from dit_ar_contract.guides import cite
from quality_suite import calibration, pool_sessions, task_metrics, task_tests
from quality_suite.assessment import NO_SPREAD
from quality_suite.case_scores import CaseScores
from quality_suite.corpora import Case, load_corpus, replicas

from ...state.files import write_record
from ...state.session import Session, open_session
from ..guards import gpu_locks
from ..workers.launch import launcher_for
from .cases import rounded_to_8_bits
from .generation import generate_corpus


@dataclass(frozen=True)
class Row:
    """One change's pass rate for one metric's test under one class's margin."""

    metric: str
    cls: str
    change: str
    multiple: float | None  # of the margin (approximate) or the resolution (quantization); None: harmless
    weight: float | None  # the blend weight of a degradation
    degradation: float  # measured over the pool's blocks, in the score's units
    margin: float
    passes: int
    sessions: int
    mean_cases: float

    def line(self) -> str:
        rate = calibration.PassRate(self.passes, self.sessions, self.mean_cases)
        lo, hi = rate.interval()
        size = f"{self.multiple:g} x" if self.multiple is not None else "harmless"
        return (f"{self.metric:<18} {self.cls:<12} {self.change:<26} {size:>9} {self.degradation:+11.4g} "
                f"{self.margin:10.4g} {100 * rate.rate:6.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]  {self.mean_cases:5.0f}")


EIGHT_BIT_ROW = "harmless: 8-bit images (sets tau_q)"
HEADER = (f"{'metric':<18} {'class':<12} {'change':<26} {'size':>9} {'degradation':>11} {'margin':>10} "
          f"{'passed':>7} [95% CI]     cases")


def _pool(session: Session, blocks: int) -> tuple[list[Case], list[list[str]]]:
    corpus = load_corpus(session.root / session.lane.corpus)
    cases = replicas(corpus, blocks * len(corpus))
    return cases, [[c.id for c in cases[i:i + len(corpus)]] for i in range(0, len(cases), len(corpus))]


def _scores(session: Session, images: dict[str, torch.Tensor], cases: list[Case], names: tuple[str, ...]) -> CaseScores:
    lane = session.lane
    return CaseScores.of(task_metrics.compute(names, images, cases, session.root, lane.quality))


def _generate(session: Session, cases: list[Case], sandboxed: bool, out: Callable[[str], None]
              ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The pool's images, and again one case per batch (a benign rerun: other matrix shapes), from the best's
    tree."""
    lane = session.lane
    tree = session.paths.best_worktree if session.paths.best_worktree.is_dir() else session.root
    key = secrets.token_hex(8)  # seeds of the calibration's own
    launcher = launcher_for(session, sandboxed)
    log = session.paths.dir / f"quality-calibration-{session.lane_id}.log"
    held = gpu_locks.acquire_lane(session.target)
    try:
        with launcher.worker("calibration", tree, log) as worker:
            worker.request("build", spec=lane.workload(launcher.model_root(tree), session.root))
            t = time.perf_counter()
            default = generate_corpus(worker, cases, lane.batch, key, lane.resolution)
            rerun = generate_corpus(worker, cases, 1, key, lane.resolution)
            out(f"pool: {len(cases)} cases generated twice in {time.perf_counter() - t:.0f} s")
    finally:
        gpu_locks.release(held)
    return default.images, rerun.images


def _rows(session: Session, name: str, cases: list[Case], blocks: list[list[str]], images: dict[str, torch.Tensor],
          harmless: dict[str, dict[str, torch.Tensor]], sizes: list[float], sessions: int,
          rng: np.random.Generator) -> list[Row]:
    lane, base_summary = session.lane, session.verified_baseline()
    if task_metrics.metric(name).statistic is not None:  # a set metric is reported, not gated: no pass rate
        return []
    resolution = base_summary.task_resolution or task_tests.fallback_resolution(
        base_summary.task_metrics, base_summary.task_envelope, lane.quality.exact.envelope_multiple)
    base = _scores(session, images, cases, (name,))
    scored = {label: _scores(session, imgs, cases, (name,)) for label, imgs in harmless.items()}
    rows = []
    for cls in (ChangeClass.APPROXIMATE, ChangeClass.QUANTIZATION):
        margin, source = task_tests.margins(cls, lane.quality, base_summary.task_metrics, resolution)[name]
        changes = {label: (None, None, s) for label, s in scored.items()}

        def degraded(w: float) -> float:
            blended = _scores(session, calibration.blend(images, cases, w), cases, (name,))
            return calibration.block_degradation(name, base, blended, blocks)

        for k in sizes:
            w = calibration.weight_for(degraded, k * margin)
            blended = _scores(session, calibration.blend(images, cases, w), cases, (name,))
            changes[f"blend {k:g} x, w={w:.4g}"] = (k, w, blended)
        # what each simulated session's baseline measures on its own cases: the floor (a blend at the margin) and
        # tau_q (the 8-bit images, which therefore are no fair harmless row of the quantization class)
        at_margin = next((c for k, _, c in changes.values() if k == 1.0), None)
        if at_margin is None:
            w = calibration.weight_for(degraded, margin)
            at_margin = _scores(session, calibration.blend(images, cases, w), cases, (name,))
        pool = pool_sessions.Pool(name, base, blocks, base_summary.task_metrics[name], resolution[name], at_margin,
                                  scored[EIGHT_BIT_ROW], {c.id: c.prompt for c in cases})
        for label, (k, w, cand) in changes.items():
            rate = pool_sessions.pass_rate(cls, lane.quality, pool, cand, sessions, rng)
            rows.append(Row(name, cls.word, label, k, w, calibration.block_degradation(name, base, cand, blocks),
                            margin, rate.passes, rate.sessions, rate.mean_cases))
    return rows


def run_quality_calibration(config_path: Path, blocks: int, sessions: int, sizes: list[float], sandboxed: bool,
                            out: Callable[[str], None] = print) -> int:
    session = open_session(config_path)
    lane = session.lane
    if not lane.task_metrics:
        raise Refused(f"lane {lane.name} configures no task metric: the task-score tests have nothing to calibrate "
                      f"(set lanes.{lane.name}.task_metrics: {cite('task-metrics')})")
    if blocks < 5:
        raise Refused(f"--blocks {blocks}: a quality calibration needs at least 5 blocks (the case budget's worth)")
    task_metrics.check_available(lane.task_metrics, lane.quality, session.root)
    if not session.verified_baseline().task_spread:  # margins, resolution and spread floors come from it
        raise Refused(NO_SPREAD)
    cases, block_ids = _pool(session, blocks)
    images, rerun = _generate(session, cases, sandboxed, out)
    harmless = {"harmless: split batches": rerun, EIGHT_BIT_ROW: rounded_to_8_bits(images)}
    rng = np.random.default_rng(secrets.randbits(64))
    out(f"{sessions} simulated sessions per change, drawn from {blocks} blocks of {len(block_ids[0])} cases; "
        f"alpha_q {lane.quality.noninferiority.alpha_q}")
    out(HEADER)
    rows = []
    for name in lane.task_metrics:
        for row in _rows(session, name, cases, block_ids, images, harmless, sizes, sessions, rng):
            rows.append(row)
            out(row.line())
    path = session.paths.dir / f"quality-calibration-{session.lane_id}.json"
    write_record(path, {"lane": session.lane_id, "blocks": blocks, "sessions": sessions,
                        "alpha_q": lane.quality.noninferiority.alpha_q, "rows": [asdict(r) for r in rows]})
    out(f"table written to {path}")
    return 0


def sizes_of(text: str) -> list[float]:
    try:
        values = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise Refused(f"--sizes {text!r}: expected comma-separated multiples such as 0.5,1,2,5") from None
    if not values or any(v <= 0 for v in values):
        raise Refused(f"--sizes {text!r}: each size must be a positive multiple of the margin")
    return values

