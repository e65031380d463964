"""How much slower one set of timed rounds is than another of the same tree measured at another time: the ratio of
their medians and a one-sided Mann-Whitney U test (scipy).

Rounds of two runs come from different processes and moments, so this is a screen, not a verdict: the harness reads
it to decide when to time the best against itself side-blind (loop/speed/role_check.py), which is a paired
comparison that decides."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import mannwhitneyu

MIN_ROUNDS = 4  # per set: fewer rounds give no shift


@dataclass(frozen=True)
class Shift:
    """`after` against `before`: the ratio of their medians (above 1: slower after) and the one-sided p-value of
    "after is slower"."""

    ratio: float
    p_value: float
    rounds: tuple[int, int]  # (before, after)

    @property
    def slower_pct(self) -> float:
        return (self.ratio - 1.0) * 100.0

    def slower(self, min_pct: float, alpha: float) -> bool:
        """Slower by at least `min_pct` per cent, and significantly so at level `alpha`."""
        return self.slower_pct >= min_pct and self.p_value < alpha

    def describe(self) -> str:
        return (f"{self.slower_pct:+.1f}% ({self.rounds[1]} rounds against {self.rounds[0]}; one-sided "
                f"Mann-Whitney p = {self.p_value:.2g})")


def shift(before: Sequence[float], after: Sequence[float]) -> Shift | None:
    """The shift of `after` against `before` (seconds per round); None with fewer than MIN_ROUNDS on a side."""
    if len(before) < MIN_ROUNDS or len(after) < MIN_ROUNDS:
        return None
    a, b = np.asarray(before, float), np.asarray(after, float)
    p_value = float(mannwhitneyu(b, a, alternative="greater").pvalue)
    return Shift(float(np.median(b) / np.median(a)), p_value, (len(a), len(b)))
