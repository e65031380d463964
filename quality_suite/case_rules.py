"""The case-count conditions of the task-score tests (pure: numpy and scipy): what a test of the mean cannot show.

A per-case loss is bounded by R, the largest loss the score allows one case (1 for a probability). A change that
ruins a share m/R of the cases (each losing R) has a mean loss of m, the margin, and a sample of n cases holds none
of the ruined ones with probability (1 - m/R)^n. That sample has a mean and a spread of 0, so no bound on the mean
can refuse it; only waiting for enough cases can, until (1 - m/R)^n <= alpha. Hence two conditions beside the
mean's bound (quality_suite/noninferiority.py), one per claim:

* approximate (margin m): **no PASS before n_min = ceil(ln alpha / ln(1 - m/R)) cases**, and the share of *severe*
  cases shown at most m/R: a case is severe when it loses more than tau, the score's flip point (half of R: 0.5 of
  the judge's probability, half the baseline's CLIP score), or, for a classifier's margin, when the margin changes
  sign from right to wrong. The share's bound is the one-sided Clopper-Pearson upper bound at level alpha / L at each
  of the L planned looks that may pass (Boole's inequality).
* quantization (margin: the resolution): a **tolerance claim**. No case seen, corpus and further cases alike, loses
  more than tau_q (measured at baseline by the harness from a change it knows to be harmless:
  quality_suite/margin_spread.py), and **no PASS before n_pass cases**. Zero exceedances in n_pass cases shows an
  exceedance share of at most p0 = 1 - alpha^(1/n_pass) at level alpha (Wilks); passing at a later look needs zero
  exceedances in more cases, an event inside the first, so the looks need no split of alpha.

A test whose condition can no longer be met within the case budget fails at once (a severe count whose bound exceeds
m/R even at the budget, a case beyond tau_q, a budget below n_min or n_pass): stopping then only lowers the pass rate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np

SEVERE, TOLERANCE = "severe", "tolerance"
CLIP_RANGE = 100.0  # R of a CLIP score where no baseline score is known yet: the score's range (100 x cosine)
NEVER = 10 ** 9  # n_min of a zero margin: no case count shows it


@lru_cache(maxsize=4096)
def cp_upper(count: int, n: int, level: float) -> float:
    """The one-sided Clopper-Pearson upper bound of a share, `count` of `n`, at level `level` (1 with no case)."""
    from scipy import stats

    if n <= 0 or count >= n:
        return 1.0
    return float(stats.beta.ppf(1 - level, count + 1, n - count))


def n_min(alpha: float, margin: float, bound: float) -> int:
    """The fewest cases that can show a mean loss within `margin` against a ruin of a share margin / bound."""
    share = margin / bound if bound > 0 else 1.0
    if share >= 1:
        return 1
    if share <= 0:
        return NEVER
    return math.ceil(math.log(alpha) / math.log1p(-share))


def p0(alpha: float, n_pass: int) -> float:
    """The exceedance share zero exceedances in `n_pass` cases shows at level `alpha`: 1 - alpha^(1/n_pass)."""
    return 1 - alpha ** (1 / n_pass)


@dataclass(frozen=True)
class CaseRule:
    """A test's case-count condition: PASS needs at least `min_cases` cases and the count of cases beyond the
    threshold shown below `limit` (severe: its Clopper-Pearson bound at `level`; tolerance: no case beyond)."""

    kind: str  # SEVERE (approximate) or TOLERANCE (quantization)
    threshold: float  # tau, the loss beyond which a case is severe, or tau_q (0 with at_flip)
    limit: float  # the share shown at most: m / R (severe) or p0 (tolerance)
    min_cases: int  # n_min (severe) or n_pass (tolerance): no PASS before
    level: float  # the bound's level at a look that may pass
    bound: float = 0.0  # R, the largest per-case loss (severe)
    at_flip: bool = False  # severe: a score that changes sign from right (> 0) to wrong (<= 0)

    def beyond(self, loss: np.ndarray, base: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """Per case: whether it counts (severe, or beyond tau_q)."""
        if self.at_flip:
            return (base > 0) & (cand <= 0)
        return loss > self.threshold

    def share_bound(self, count: int, n: int) -> float:
        return cp_upper(int(count), int(n), self.level)

    def shown(self, count: int, n: int) -> bool:
        """Whether the condition holds after `count` of `n` cases (the mean's bound aside)."""
        if n < self.min_cases:
            return False
        if self.kind == TOLERANCE:
            return count == 0
        return self.share_bound(count, n) <= self.limit

    def hopeless(self, count: int, budget: int) -> str:
        """Why the condition can no longer hold within a budget of `budget` cases ("" while it still can)."""
        if budget < self.min_cases:
            name = "n_pass" if self.kind == TOLERANCE else "n_min"
            return f"the case budget {budget} is below {name} {self.min_cases}: it cannot pass on this lane"
        if self.kind == TOLERANCE and count > 0:
            return f"{count} case(s) lost more than tau_q {self.threshold:.3g}"
        if self.kind == SEVERE and self.share_bound(count, budget) > self.limit:
            return (f"{count} severe case(s): the severe share's bound exceeds {100 * self.limit:.3g}% even at the "
                    f"budget of {budget} cases")
        return ""

    def text(self, count: int, n: int) -> str:
        """'severe cases (loss > 0.5) 0 of 160 [bound 2.28% <= 2.5%], n_min 119' or
        'beyond tau_q 0.0016: 0 of 200 (p0 1.49%), n_pass 200'."""
        if self.kind == TOLERANCE:
            return (f"beyond tau_q {self.threshold:.3g}: {count} of {n} (p0 {100 * self.limit:.3g}%), "
                    f"n_pass {self.min_cases}")
        what = "sign changes" if self.at_flip else f"loss > {self.threshold:.3g}"
        return (f"severe cases ({what}) {count} of {n} [bound {100 * self.share_bound(count, n):.3g}% <= "
                f"{100 * self.limit:.3g}%], n_min {self.min_cases}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> CaseRule | None:
        if not data:
            return None
        return cls(str(data["kind"]), float(data["threshold"]), float(data["limit"]), int(data["min_cases"]),
                   float(data["level"]), float(data.get("bound", 0.0)), bool(data.get("at_flip", False)))


def severe_rule(alpha: float, margin: float, bound: float, fraction: float, at_flip: bool,
                looks: Sequence[int]) -> CaseRule:
    """The approximate claim's condition: n_min from the margin and R (`bound`), tau = `fraction` x R, the level
    alpha split over the planned looks (case counts `looks`) at or beyond n_min."""
    need = n_min(alpha, margin, bound)
    passing = max(1, sum(1 for n in looks if n >= need))
    return CaseRule(SEVERE, 0.0 if at_flip else fraction * bound, min(margin / bound, 1.0) if bound > 0 else 1.0,
                    need, alpha / passing, bound, at_flip)


def tolerance_rule(alpha: float, tau_q: float, n_pass: int) -> CaseRule:
    """The quantization claim's condition: no case beyond tau_q, and no PASS before n_pass cases."""
    return CaseRule(TOLERANCE, tau_q, p0(alpha, n_pass), n_pass, alpha)


def loss_bound(metric_bound: float, base_score: float | None) -> float:
    """R: the metric's own bound, or (0: the baseline's own score) the baseline's score, else CLIP_RANGE."""
    if metric_bound > 0:
        return metric_bound
    return abs(base_score) if base_score else CLIP_RANGE
