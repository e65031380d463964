"""Error rates of the task-score tests, measured: known degradations and harmless changes applied by the harness
to a pool of outputs, and simulated sessions drawn from the pool's per-case scores (pure but for the images).

`dit-ar calibrate --quality` (loop/quality/calibration.py) generates the pool on the session's lane;
lab/studies/quality_simulation.py replays recorded pools over many more sessions. Both use this code.

* The pool is a list of *blocks*: each block is the corpus once, under its own seeds. A simulated session takes
  blocks in a random order: its first look sees one block (the corpus), its later looks the next blocks, up to
  the case budget, as an experiment's tests see the corpus, then further cases.
* A known degradation is `blend`: each image mixed with weight w with the image of another case of the pool
  (one with another prompt), a ghost of a wrong answer; `weight_for` finds the w at which a metric's degradation,
  averaged over the pool's blocks, equals a target (a multiple of the margin or of the resolution).
* Harmless changes: the pool generated again under a benign perturbation (reversed batches), and the pool's
  images rounded to 8 bits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from . import task_metrics, task_tests
from .case_scores import CaseScores
from .corpora import Case
from .noninferiority import Design, TestSpec, degradation, set_look


def other_case(cases: Sequence[Case], i: int) -> int:
    """The index of the first case after case i (cyclically) with another prompt: the ghost blended into i."""
    for step in range(1, len(cases)):
        j = (i + step) % len(cases)
        if cases[j].prompt != cases[i].prompt and cases[j].label != cases[i].label:
            return j
    return i


def blend(images: dict[str, torch.Tensor], cases: Sequence[Case], weight: float) -> dict[str, torch.Tensor]:
    """Each case's image mixed with another case's: (1 - w) x + w x_other."""
    out = {}
    for i, case in enumerate(cases):
        other = images[cases[other_case(cases, i)].id]
        out[case.id] = ((1 - weight) * images[case.id] + weight * other).clamp(0, 1)
    return out


def block_degradation(name: str, base: CaseScores, cand: CaseScores, blocks: Sequence[Sequence[str]]) -> float:
    """A metric's degradation estimate averaged over the pool's blocks (what a first look estimates)."""
    values = []
    for block in blocks:
        b, c = base.select(block).paired(cand.select(block), name)
        if len(b):
            values.append(task_tests.statistic_degradation(name, b, c))
    return float(np.mean(values)) if values else float("nan")


def weight_for(degradation: Callable[[float], float], target: float, grid: int = 21, steps: int = 12) -> float:
    """The blend weight at which `degradation(w)` reaches `target`, on the rising branch after its minimum
    (a degradation may first improve a set metric); 1.0 when even the full blend stays below the target."""
    ws = np.linspace(0.0, 1.0, grid)
    values = [degradation(float(w)) for w in ws]
    start = int(np.argmin(values))
    above = [k for k in range(start, grid) if values[k] >= target]
    if not above:
        return 1.0
    hi = above[0]
    if hi == start:
        return float(ws[hi])
    lo_w, hi_w = float(ws[hi - 1]), float(ws[hi])
    for _ in range(steps):
        mid = (lo_w + hi_w) / 2
        lo_w, hi_w = (mid, hi_w) if degradation(mid) < target else (lo_w, mid)
    return hi_w


class PoolSupply:
    """The later blocks of one simulated session (task_tests.CaseSupply) over recorded per-case scores."""

    def __init__(self, ids: list[str], cand: CaseScores, refs: dict[str, CaseScores]) -> None:
        self.ids, self.cand, self.refs, self.used = ids, cand, refs, 0

    def available(self) -> int:
        return len(self.ids) - self.used

    def take(self, count: int, references: tuple[str, ...]) -> task_tests.Block:
        block = self.ids[self.used:self.used + count]
        self.used += len(block)
        return task_tests.Block(self.cand.select(block), {r: self.refs[r].select(block) for r in references})


@dataclass(frozen=True)
class PassRate:
    """How often simulated sessions passed a test: passes of sessions, and the mean case count at the decision."""

    passes: int
    sessions: int
    mean_cases: float

    @property
    def rate(self) -> float:
        return self.passes / self.sessions if self.sessions else float("nan")

    def interval(self) -> tuple[float, float]:
        """Clopper-Pearson 95 % interval of the pass rate."""
        from scipy import stats

        k, n = self.passes, self.sessions
        lo = float(stats.beta.ppf(0.025, k, n - k + 1)) if k > 0 else 0.0
        hi = float(stats.beta.ppf(0.975, k + 1, n - k)) if k < n else 1.0
        return lo, hi


def spread_of(name: str, base: np.ndarray, cand: np.ndarray, margin: float, measured: float,
              resamples: int = 200) -> float:
    """The spread of the degradation of paired rows, scaled to `margin` (`measured`: the rows' degradation)."""
    metric = task_metrics.metric(name)
    if metric.statistic is None:
        raw = float(degradation(base, cand, metric.lower_is_better).std(ddof=1))
    else:
        look = set_look(base, cand, metric.statistic, metric.lower_is_better, 0.05, resamples, 0)
        raw = look.se * math.sqrt(len(base))
    return raw * margin / measured if measured > 0 else raw


def floored(specs: Sequence[TestSpec], base: CaseScores, at_margin: CaseScores,
            blocks: Sequence[Sequence[str]]) -> list[TestSpec]:
    """The specs with the spread floor a baseline of these blocks' cases would measure (`spread_of`
    of `at_margin`, a blend at 1 x each spec's margin); set metrics keep none."""
    from dataclasses import replace

    ids = [cid for block in blocks for cid in block]
    out = []
    for s in specs:
        if s.statistic is not None:
            out.append(s)
            continue
        b, c = base.select(ids).paired(at_margin.select(ids), s.metric)
        measured = block_degradation(s.metric, base, at_margin, blocks)
        out.append(replace(s, spread=spread_of(s.metric, b, c, s.margin, measured)))
    return out


def session(specs: Sequence[TestSpec], design: Design, base: CaseScores, cand: CaseScores,
            blocks: Sequence[Sequence[str]], order: Sequence[int], at_margin: CaseScores | None = None
            ) -> tuple[bool, int]:
    """One simulated session over the blocks in `order` (the first as the corpus): whether every test passed,
    and the cases the last decision saw. With `at_margin` (a blend at 1 x the margin) each per-case test gets
    the spread floor measured on the session's own cases, as its baseline would measure it."""
    if at_margin is not None:
        specs = floored(specs, base, at_margin, [blocks[k] for k in order])
    ids = [cid for k in order for cid in blocks[k]][:design.max_cases]
    first = list(blocks[order[0]])
    supply = PoolSupply(ids[len(first):], cand, {task_tests.BASELINE: base})
    start = task_tests.Block(cand.select(first), {task_tests.BASELINE: base.select(first)})
    results = task_tests.run(specs, design, start, len(first), supply)
    return all(r.passed for r in results), max((r.last.n for r in results if r.looks), default=0)


def pass_rate(specs: Sequence[TestSpec], design: Design, base: CaseScores, cand: CaseScores,
              blocks: Sequence[Sequence[str]], sessions: int, rng: np.random.Generator,
              at_margin: CaseScores | None = None) -> PassRate:
    """Sessions drawn from the pool: blocks in a random order, the first as the corpus, the rest as further cases
    up to the budget; a session passes when every test in `specs` passes (against the baseline)."""
    per_session = max(1, -(-design.max_cases // len(blocks[0])))
    passes, cases = 0, 0
    for _ in range(sessions):
        passed, n = session(specs, design, base, cand, blocks, rng.permutation(len(blocks))[:per_session], at_margin)
        passes += passed
        cases += n
    return PassRate(passes, sessions, cases / max(sessions, 1))
