"""Paired non-inferiority tests of task scores: one look's bound and decision (pure: numpy and scipy).

The baseline (or the parent) and the candidate are scored on the same frozen cases with the same keyed seeds.
Per metric, the *degradation* is how much worse the candidate is, in the score's own units (positive = worse):

* a per-case score (the judge's probability of the labelled digit, a CLIP score, a classifier's margin of the
  labelled class): the mean over cases of the paired differences; its standard error is the larger of the
  differences' sample standard deviation and the test's *spread floor*, over sqrt(n), and the one-sided bound
  uses Student's t with n - 1 degrees of freedom;
* a set metric (a Frechet distance, a function of all cases together): the metric of the candidate's cases minus
  the metric of the reference's, with the paired bootstrap's standard error (cases resampled with replacement, the
  same resample on both sides, scipy.stats.bootstrap) and the normal quantile. It is reported, not gated
  (quality_suite/task_tests.py).

The spread floor (`TestSpec.spread`) is the per-case spread of a degradation exactly at the margin, measured by
the harness at baseline (quality_suite/margin_spread.py): under the null hypothesis (true degradation = margin)
the mean's sampling spread is at least spread / sqrt(n). Per-case degradations are right-skewed (most cases lose
nothing, a few lose much); a sample that misses the few heavy cases has a small mean *and* a small standard
deviation, and the floor keeps its bound from shrinking with it. It assumes a change spreads its loss over the cases
no more unevenly than the harness's blend; the case-count condition (quality_suite/case_rules.py) covers changes
that concentrate their loss on a few cases.

The levels over the looks (`Design.level`): a look at n cases spends alpha(t) - alpha(t_previous) of `alpha`, with
t = n / max_cases and the Hwang-Shih-DeCani spending function alpha(t) = alpha (1 - e^(-gamma t)) / (1 - e^(-gamma));
the last look spends what is left. By Boole's inequality the probability that any look's bound falls below the true
degradation is at most the sum of the spent levels, alpha, whatever the correlation of the looks. A look before the
test's n_min or n_pass cannot pass (`Look.passable` is False); its level only sets its FAIL rule.

The sample's spread in the standard error is never below `sparse_spread`: a loss carried by a share of the cases has
a variance in proportion to its mean, so a sample below the margin understates the spread the same losses would have
at the margin; this keeps changes more uneven than the floor's blend near their level.

Decision at a look (`decide`): FAIL when the lower bound (estimate - q * se) exceeds the margin (a regression
measured) or the case-count condition can no longer be met within the budget; PASS when the upper bound is within
the margin and the case-count condition is shown; otherwise MORE cases, and at the last look (the case budget
reached, or no more cases) FAIL as not shown.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from enum import Enum
from functools import lru_cache
from typing import Any

import numpy as np

from .case_rules import NEVER, TOLERANCE, CaseRule

# statistic of a set metric: features [B, n, d] (B resamples of n cases) -> the metric of each resample [B]
SetStatistic = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Design:
    """The error budget of one test, its looks and how the budget is spent over them."""

    alpha: float = 0.05  # the false-pass rate of one test (metric against one reference) over all its looks
    max_cases: int = 200  # the case budget: the information fraction of a look is n / max_cases
    spending_gamma: float = 2.0  # Hwang-Shih-DeCani parameter: larger spends more of alpha at the early looks
    resamples: int = 200  # paired bootstrap resamples for set metrics
    first_cases: int = 0  # the first look's case count (the corpus; 0: the budget)
    tolerance_cases: int = 200  # n_pass of the quantization claim (quality_suite/case_rules.py)

    def spent(self, n: int) -> float:
        """The false-pass rate allowed up to a look at n cases."""
        t = min(max(n / self.max_cases, 0.0), 1.0)
        g = self.spending_gamma
        if abs(g) < 1e-9:
            return self.alpha * t
        return self.alpha * (1 - math.exp(-g * t)) / (1 - math.exp(-g))

    def look_alpha(self, n_before: int, n: int) -> float:
        """The nominal level of a look at n cases after a look at n_before cases (0: the first look)."""
        return max(self.spent(n) - self.spent(n_before), 0.0)

    def schedule(self) -> tuple[int, ...]:
        """The planned looks' case counts: the first (the corpus), then doubling up to the budget."""
        n = self.first_cases if 0 < self.first_cases < self.max_cases else self.max_cases
        sizes = [n]
        while n < self.max_cases:
            n = min(2 * n, self.max_cases)
            sizes.append(n)
        return tuple(sizes)

    def sizes(self, total: int, complete: bool) -> tuple[int, ...]:
        """The looks `total` cases allow: the planned ones they reach and, when no more cases will come
        (`complete`), a last look at `total` between two planned ones."""
        planned = [n for n in self.schedule() if n <= total]
        if complete and 0 < total < self.max_cases and (not planned or planned[-1] < total):
            planned.append(total)
        return tuple(planned)

    def level(self, n_before: int, n: int, last: bool) -> float:
        """The level of a look at n cases after one at n_before: its increment of the spending function, the last
        look what is left."""
        return max(self.alpha - self.spent(n_before), 0.0) if last else self.look_alpha(n_before, n)


class Decision(str, Enum):
    PASS = "pass"  # the one-sided upper bound within the margin, and the case-count condition shown
    FAIL = "fail"  # a regression measured, or non-inferiority not shown within the case budget
    MORE = "more"  # undecided: add cases
    REPORTED = "reported"  # a set metric: its figures are shown, the gate does not use them


@dataclass(frozen=True)
class Look:
    """One look of one test: the degradation estimate over n cases, its standard error and the bound's quantile."""

    n: int
    estimate: float
    se: float
    quantile: float
    alpha: float  # the level this look spent
    floor_se: float = 0.0  # the spread floor's standard error at n cases (se is never below it)
    beyond: int = 0  # cases beyond the case-count condition's threshold among the n (severe, or beyond tau_q)
    passable: bool = True  # the look may pass (at least n_min or n_pass cases)

    @property
    def upper(self) -> float:
        return self.estimate + self.quantile * self.se

    @property
    def lower(self) -> float:
        return self.estimate - self.quantile * self.se

    @property
    def confidence(self) -> float:
        return 1 - self.alpha

    @property
    def floored(self) -> bool:
        """The spread floor, not the sample's own spread, set the standard error."""
        return self.floor_se > 0 and self.se <= self.floor_se


@dataclass(frozen=True)
class TestSpec:
    """What one test compares: a metric against one reference (the baseline or the parent) within a margin."""

    metric: str
    reference: str  # "baseline" or "parent"
    margin: float  # the largest degradation allowed, in the score's units
    margin_source: str  # where the margin comes from, in words ("approximate margin", "resolution")
    lower_is_better: bool = False
    statistic: SetStatistic | None = None  # None: a per-case score (the mean of the paired differences)
    spread: float = 0.0  # the spread floor: per-case spread of a degradation at the margin (se >= spread / sqrt n)
    rule: CaseRule | None = None  # the case-count condition (n_min and severe cases, or n_pass and tau_q)


@dataclass(frozen=True)
class TestResult:
    """A test's looks and its decision, in words."""

    metric: str
    reference: str
    margin: float
    margin_source: str
    looks: tuple[Look, ...]
    decision: Decision
    reason: str = ""
    rule: CaseRule | None = None
    gated: bool = True  # False: a set metric, reported only

    @property
    def passed(self) -> bool:
        return self.decision is Decision.PASS

    @property
    def last(self) -> Look:
        return self.looks[-1]

    def interval_text(self) -> str:
        """'+0.0029 [one-sided 95% bound +0.011; lower -0.005] over 40 cases'."""
        look = self.last
        return (f"{look.estimate:+.3g} [one-sided {100 * (1 - self.alpha_spent()):.3g}% bound {look.upper:+.3g}; "
                f"lower {look.lower:+.3g}] over {look.n} cases")

    def alpha_spent(self) -> float:
        return sum(look.alpha for look in self.looks)

    def condition_text(self) -> str:
        """The case-count condition at the last look ('' without one)."""
        return self.rule.text(self.last.beyond, self.last.n) if self.rule is not None and self.looks else ""

    def describe(self) -> str:
        look = self.last
        verdict = {Decision.PASS: "non-inferior", Decision.FAIL: self.reason or "not shown",
                   Decision.MORE: "undecided", Decision.REPORTED: self.reason or "reported, not gated"}[self.decision]
        condition = f"; {self.condition_text()}" if self.rule is not None else ""
        return (f"{self.metric} vs {self.reference}: degradation {look.estimate:+.3g} "
                f"(one-sided bound {look.upper:+.3g}, lower {look.lower:+.3g}, {look.n} cases, "
                f"look {len(self.looks)}{condition}) vs {self.margin_source} {self.margin:.3g}: {verdict}")

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["decision"] = self.decision.value
        data["looks"] = [asdict(look) for look in self.looks]
        data["rule"] = self.rule.as_dict() if self.rule is not None else None
        if self.rule is not None and self.looks:  # the figures the test line prints, for readers of quality.json
            data["case_condition"] = {"beyond": self.last.beyond, "cases": self.last.n,
                                      "share_bound": self.rule.share_bound(self.last.beyond, self.last.n),
                                      "min_cases": self.rule.min_cases, "limit": self.rule.limit,
                                      "text": self.condition_text()}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TestResult:
        looks = tuple(Look(**{k: look[k] for k in ("n", "estimate", "se", "quantile", "alpha")},
                           floor_se=float(look.get("floor_se", 0.0)), beyond=int(look.get("beyond", 0)),
                           passable=bool(look.get("passable", True))) for look in data.get("looks") or ())
        return cls(str(data.get("metric", "")), str(data.get("reference", "")), float(data.get("margin", 0.0)),
                   str(data.get("margin_source", "")), looks, Decision(data.get("decision", "fail")),
                   str(data.get("reason", "")), CaseRule.from_dict(data.get("rule")), bool(data.get("gated", True)))


def degradation(base: np.ndarray, cand: np.ndarray, lower_is_better: bool) -> np.ndarray:
    """Per-case (or per-resample) degradation: how much worse the candidate is, positive = worse."""
    return cand - base if lower_is_better else base - cand


def floor_se(spread: float, n: int) -> float:
    """The standard error the spread floor allows at n cases: spread / sqrt(n) (0 without a floor)."""
    return spread / math.sqrt(n) if spread > 0 and n > 0 else 0.0


@lru_cache(maxsize=4096)
def t_quantile(alpha: float, df: int) -> float:
    """Student's t quantile of level 1 - alpha (infinite at level 0)."""
    from scipy import stats

    return float(stats.t.ppf(1 - alpha, df)) if alpha > 0 else math.inf


def mean_look(base: np.ndarray, cand: np.ndarray, lower_is_better: bool, alpha: float, spread: float = 0.0) -> Look:
    """The paired mean difference of per-case scores, with Student's t bound on the larger of the sample's
    standard error and the spread floor's."""
    return loss_look(degradation(np.asarray(base, np.float64), np.asarray(cand, np.float64), lower_is_better),
                     alpha, spread)


def sparse_spread(d: np.ndarray, margin: float) -> float:
    """The spread a loss made of the same per-case losses would have at the margin: sqrt(margin x L), L the
    loss-weighted mean of the cases' losses (sum of d+^2 over sum of d+; 0 when no case lost). A loss carried by a
    share of the cases has a variance in proportion to its mean (margin x E[L^2] / E[L] at the margin), so the
    sample's own spread understates it in a sample below the margin, the samples that pass."""
    lost = np.clip(d, 0.0, None)
    total = float(lost.sum())
    return math.sqrt(margin * float((lost * lost).sum()) / total) if margin > 0 and total > 0 else 0.0


def loss_look(d: np.ndarray, alpha: float, spread: float = 0.0, beyond: int = 0, passable: bool = True,
              margin: float = 0.0) -> Look:
    """`mean_look` of the per-case degradations `d` themselves; with `margin`, the sample's spread is never below
    `sparse_spread`'s."""
    n = len(d)
    floor = floor_se(spread, n)
    s = max(float(d.std(ddof=1)), sparse_spread(d, margin)) if n > 1 else math.inf
    se = max(s / math.sqrt(n), floor)
    return Look(n, float(d.mean()), se, t_quantile(alpha, max(n - 1, 1)), alpha, floor, beyond, passable)


def set_look(base: np.ndarray, cand: np.ndarray, statistic: SetStatistic, lower_is_better: bool, alpha: float,
             resamples: int, seed: int, spread: float = 0.0) -> Look:
    """The difference of a set metric between the two sides, with the larger of the paired bootstrap's standard
    error and the spread floor's."""
    from scipy import stats

    base, cand = np.asarray(base, np.float64), np.asarray(cand, np.float64)
    n = len(base)

    def diff(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        idx = np.atleast_2d(np.asarray(idx, dtype=np.int64))
        return degradation(statistic(base[idx]), statistic(cand[idx]), lower_is_better)

    estimate = float(diff(np.arange(n))[0])
    boot = stats.bootstrap((np.arange(n),), diff, vectorized=True, n_resamples=resamples, method="percentile",
                           rng=np.random.default_rng(seed))
    q = float(stats.norm.ppf(1 - alpha)) if alpha > 0 else math.inf
    floor = floor_se(spread, n)
    return Look(n, estimate, max(float(boot.standard_error), floor), q, alpha, floor)


def decide(look: Look, margin: float, last: bool, rule: CaseRule | None = None,
           budget: int = 0) -> tuple[Decision, str]:
    """PASS, FAIL (a regression measured, the case-count condition out of reach of the `budget`, or not shown at
    the last look) or MORE."""
    if look.lower > margin:
        return Decision.FAIL, "a regression measured (the lower bound exceeds the margin)"
    hopeless = rule.hopeless(look.beyond, budget if budget > 0 else NEVER) if rule is not None else ""
    if hopeless:
        return Decision.FAIL, hopeless
    shown = rule is None or rule.shown(look.beyond, look.n)
    if look.upper <= margin and shown:
        return Decision.PASS, ""
    if last:
        return Decision.FAIL, _not_shown(look, margin, rule)
    return Decision.MORE, ""


def _not_shown(look: Look, margin: float, rule: CaseRule | None) -> str:
    if look.upper > margin or rule is None:
        return f"not shown within the case budget ({look.n} cases)"
    if look.n < rule.min_cases:
        name = "n_pass" if rule.kind == TOLERANCE else "n_min"
        return f"the cases ran out before {name}: {look.n} < {rule.min_cases}"
    return f"the severe share's bound {100 * rule.share_bound(look.beyond, look.n):.3g}% exceeds " \
           f"{100 * rule.limit:.3g}% at the last look ({look.n} cases)"


def seed_of(spec: TestSpec, n: int) -> int:
    """A fixed bootstrap seed per test and case count: the same data give the same decision."""
    return zlib.crc32(f"{spec.metric}:{spec.reference}:{n}".encode())
