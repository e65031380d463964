"""Error rates of the task-score tests, measured: known degradations and harmless changes applied by the harness
to a pool of outputs, and simulated sessions drawn from the pool's per-case scores (pure but for the images).

`dit-ar calibrate --quality` (loop/quality/calibration.py) generates the pool on the session's lane and runs the
gate over simulated sessions drawn from it (quality_suite/pool_sessions.py); lab/studies/quality_simulation.py
replays recorded pools over many more sessions. Both use this code.

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

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from . import task_tests
from .case_scores import CaseScores
from .corpora import Case


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
