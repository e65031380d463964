"""Paired non-inferiority tests of task scores, sequential over growing case sets (pure: numpy and scipy).

The baseline (or the parent) and the candidate are scored on the same frozen cases with the same keyed seeds.
Per metric, the *degradation* is how much worse the candidate is, in the score's own units (positive = worse):

* a per-case score (the judge's probability of the labelled digit, a CLIP score, a classifier's margin of the
  labelled class): the mean over cases of the paired differences; its standard error is the larger of the
  differences' sample standard deviation and the test's *spread floor*, over sqrt(n), and the one-sided bound
  uses Student's t with n - 1 degrees of freedom;
* a set metric (a Frechet distance, a function of all cases together): the metric of the candidate's cases minus
  the metric of the reference's; its standard error is the larger of the paired bootstrap's (cases resampled
  with replacement, the same resample on both sides, scipy.stats.bootstrap) and the spread floor over sqrt(n),
  and the bound uses the normal quantile.

The spread floor (`TestSpec.spread`) is the per-case spread of a degradation exactly at the margin, measured by
the harness at baseline (quality_suite/margin_spread.py): under the null hypothesis (true degradation = margin)
the mean's sampling spread is at least spread / sqrt(n). Per-case degradations are right-skewed (most cases lose
nothing, a few lose much); a sample that misses the few heavy cases has a small mean *and* a small standard
deviation, so a bound from the sample's own spread passes it far more often than its level says. A right-skewed
mean has a lighter lower tail than the normal, so with the floor the bound passes an at-margin change at most
about the level spent; the sample's own spread still governs when it is larger.

At a look with n cases the test spends alpha(t) - alpha(t_previous) of its false-pass rate `alpha`, with
t = n / max_cases and the Hwang-Shih-DeCani spending function alpha(t) = alpha (1 - e^(-gamma t)) / (1 - e^(-gamma)).
The bound at a look is estimate + q * se with q the (1 - spent-at-this-look) quantile. By Boole's inequality the
probability that any look's bound falls below the true degradation is at most the sum of the spent levels, i.e.
alpha, whatever the correlation of the looks: a change whose true degradation is at least the margin passes with
probability at most alpha.

Decision at a look: PASS when the upper bound is within the margin (non-inferiority shown); FAIL when the lower
bound (estimate - q * se) exceeds the margin (a regression measured: the degradation is above the margin at the
same level; stopping there can only lower the false-pass rate); otherwise MORE cases, and at the last look
(the case budget reached, or no more cases) FAIL as not shown within the budget.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

import numpy as np

# statistic of a set metric: features [B, n, d] (B resamples of n cases) -> the metric of each resample [B]
SetStatistic = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Design:
    """The error budget of one test and how it is spent over its looks."""

    alpha: float = 0.05  # the false-pass rate of one test (metric against one reference) over all its looks
    max_cases: int = 200  # the case budget: the information fraction of a look is n / max_cases
    spending_gamma: float = 2.0  # Hwang-Shih-DeCani parameter: larger spends more of alpha at the early looks
    resamples: int = 200  # paired bootstrap resamples for set metrics

    def spent(self, n: int) -> float:
        """The false-pass rate allowed up to a look at n cases."""
        t = min(max(n / self.max_cases, 0.0), 1.0)
        g = self.spending_gamma
        if abs(g) < 1e-9:
            return self.alpha * t
        return self.alpha * (1 - math.exp(-g * t)) / (1 - math.exp(-g))

    def look_alpha(self, n_before: int, n: int) -> float:
        """The level a look at n cases spends after a look at n_before cases (0: the first look)."""
        return max(self.spent(n) - self.spent(n_before), 0.0)


class Decision(str, Enum):
    PASS = "pass"  # the one-sided upper bound of the degradation is within the margin
    FAIL = "fail"  # a regression measured, or non-inferiority not shown within the case budget
    MORE = "more"  # undecided: add cases


@dataclass(frozen=True)
class Look:
    """One look of one test: the degradation estimate over n cases, its standard error and the bound's quantile."""

    n: int
    estimate: float
    se: float
    quantile: float
    alpha: float  # the level this look spent
    floor_se: float = 0.0  # the spread floor's standard error at n cases (se is never below it)

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

    @property
    def passed(self) -> bool:
        return self.decision is Decision.PASS

    @property
    def last(self) -> Look:
        return self.looks[-1]

    def interval_text(self) -> str:
        """'+0.0029 [upper 95% bound +0.011] over 40 cases'."""
        look = self.last
        return (f"{look.estimate:+.3g} [one-sided {100 * (1 - self.alpha_spent()):.3g}% bound {look.upper:+.3g}; "
                f"lower {look.lower:+.3g}] over {look.n} cases")

    def alpha_spent(self) -> float:
        return sum(look.alpha for look in self.looks)

    def describe(self) -> str:
        look = self.last
        verdict = {Decision.PASS: "non-inferior", Decision.FAIL: self.reason or "not shown",
                   Decision.MORE: "undecided"}[self.decision]
        return (f"{self.metric} vs {self.reference}: degradation {look.estimate:+.3g} "
                f"(one-sided bound {look.upper:+.3g}, lower {look.lower:+.3g}, {look.n} cases, "
                f"look {len(self.looks)}) vs {self.margin_source} {self.margin:.3g}: {verdict}")

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["decision"] = self.decision.value
        data["looks"] = [asdict(look) for look in self.looks]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TestResult:
        looks = tuple(Look(**{k: look[k] for k in ("n", "estimate", "se", "quantile", "alpha")},
                           floor_se=float(look.get("floor_se", 0.0))) for look in data.get("looks") or ())
        return cls(str(data.get("metric", "")), str(data.get("reference", "")), float(data.get("margin", 0.0)),
                   str(data.get("margin_source", "")), looks, Decision(data.get("decision", "fail")),
                   str(data.get("reason", "")))


def degradation(base: np.ndarray, cand: np.ndarray, lower_is_better: bool) -> np.ndarray:
    """Per-case (or per-resample) degradation: how much worse the candidate is, positive = worse."""
    return cand - base if lower_is_better else base - cand


def floor_se(spread: float, n: int) -> float:
    """The standard error the spread floor allows at n cases: spread / sqrt(n) (0 without a floor)."""
    return spread / math.sqrt(n) if spread > 0 and n > 0 else 0.0


def mean_look(base: np.ndarray, cand: np.ndarray, lower_is_better: bool, alpha: float, spread: float = 0.0) -> Look:
    """The paired mean difference of per-case scores, with Student's t bound on the larger of the sample's
    standard error and the spread floor's."""
    from scipy import stats

    d = degradation(np.asarray(base, np.float64), np.asarray(cand, np.float64), lower_is_better)
    n = len(d)
    floor = floor_se(spread, n)
    se = max(float(d.std(ddof=1) / math.sqrt(n)), floor) if n > 1 else math.inf
    q = float(stats.t.ppf(1 - alpha, max(n - 1, 1))) if alpha > 0 else math.inf
    return Look(n, float(d.mean()), se, q, alpha, floor)


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


def decide(look: Look, margin: float, last: bool) -> tuple[Decision, str]:
    """PASS, FAIL (a regression measured, or not shown at the last look) or MORE."""
    if look.upper <= margin:
        return Decision.PASS, ""
    if look.lower > margin:
        return Decision.FAIL, "a regression measured (the lower bound exceeds the margin)"
    if last:
        return Decision.FAIL, f"not shown within the case budget ({look.n} cases)"
    return Decision.MORE, ""


def seed_of(spec: TestSpec, n: int) -> int:
    """A fixed bootstrap seed per test and case count: the same data give the same decision."""
    return zlib.crc32(f"{spec.metric}:{spec.reference}:{n}".encode())


@dataclass
class SequentialTest:
    """One test over growing case sets: `look(base, cand, last)` with all cases so far, until it decides."""

    spec: TestSpec
    design: Design
    looks: list[Look] = field(default_factory=list)
    decision: Decision = Decision.MORE
    reason: str = ""

    def look(self, base: np.ndarray, cand: np.ndarray, last: bool) -> Decision:
        n_before = self.looks[-1].n if self.looks else 0
        n = len(base)
        last = last or n >= self.design.max_cases
        alpha = self.design.look_alpha(n_before, n)
        if last:  # the last look spends whatever is left
            alpha = max(self.design.alpha - sum(look.alpha for look in self.looks), 0.0)
        s = self.spec
        if s.statistic is None:
            result = mean_look(base, cand, s.lower_is_better, alpha, s.spread)
        else:
            result = set_look(base, cand, s.statistic, s.lower_is_better, alpha, self.design.resamples,
                              seed_of(s, n), s.spread)
        self.looks.append(result)
        self.decision, self.reason = decide(result, s.margin, last)
        return self.decision

    def result(self) -> TestResult:
        s = self.spec
        decision = self.decision
        reason = self.reason
        if decision is Decision.MORE:  # stopped before its last look (e.g. another test failed)
            decision, reason = Decision.FAIL, "undecided when the gate stopped"
        return TestResult(s.metric, s.reference, s.margin, s.margin_source, tuple(self.looks), decision, reason)
