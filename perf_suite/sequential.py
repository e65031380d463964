"""The sequential performance decision: one estimate over segments of paired rounds, looked at after each
segment, with the false-keep rate held at `alpha` over all looks (a group-sequential design).

Data. A *segment* is one fresh pair of worker processes (candidate and best) timed for `rounds` paired
rounds; each round gives one log ratio r = log(candidate time / best time). Within a segment the rounds
share the two processes' offsets (a process can be a few per cent faster than its twin for its whole
life), so the segments, not the rounds, are the independent units.

Estimate. Per segment the 20%-trimmed mean of the log ratios (the rounds hit by a burst of a loaded
machine fall into the trimmed tails) and its standard error from the winsorized variance (Tukey &
McLaughlin, 1963; Wilcox, "Introduction to Robust Estimation and Hypothesis Testing", ch. 3). Over segments
the mean of the trimmed means, with a standard error from two variance parts: the within-segment part (the
mean of the segments' squared standard errors, with its degrees of freedom) and the between-process part,
estimated from the spread of the segment means but never below the
configured floor `offset_floor_pct`: the standard deviation of the offset between the two fresh processes
of a pair running identical code, measured on that kind of machine (docs/perf-harness.md). The floor is
what makes a keep after two segments safe; set it from a no-op study, not from hope.

Decision after segment k (k = min_segments .. max_segments):
* KEEP when the z statistic crosses the group-sequential boundary for look k *and* the estimated
  improvement reaches `min_improvement_pct`;
* DISCARD early ("not faster by the minimum") when even the optimistic bound (estimate + `futility_z`
  standard errors) is below `min_improvement_pct`, or, from `min_segments` on, when the estimate shows no
  gain at all (z >= 0); both futility stops are non-binding, so they can only lower the false-keep rate;
* after `max_segments` without either: DISCARD as inconclusive, with the estimate and its interval.

Boundaries. Lan-DeMets alpha spending with the Hwang-Shih-DeCani family alpha(t) = alpha (1 - e^{-gamma t}) /
(1 - e^{-gamma}) at information fractions t = k / max_segments, computed by numerical integration of the
Brownian motion of the cumulative z statistic (Jennison & Turnbull, "Group Sequential Methods with
Applications to Clinical Trials", 2000, ch. 7 and 19). gamma = 1 is close to Pocock's flat boundaries
(early stops for large effects are cheap), gamma = -4 to O'Brien-Fleming's (early stops need huge effects).
Because the variance is estimated from a few rounds, each boundary is moved to the Student t quantile of
the same tail probability, with the within-segment degrees of freedom (a small-sample correction: without
it, simulated no-op experiments with 8 noisy rounds per segment were kept 1.5-1.8% of the time at
alpha 1%; with it 0.2-0.7%, tests/unit/test_sequential.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache

import numpy as np
from scipy.stats import chi2, norm
from scipy.stats import t as student

TRIM = 0.2  # the fraction trimmed from each end of a segment's log ratios


@dataclass(frozen=True)
class Design:
    """The sequential design (from the lane's performance protocol)."""

    alpha: float = 0.01
    min_improvement_pct: float = 2.0
    min_segments: int = 2
    max_segments: int = 6
    offset_floor_pct: float = 1.0
    spending_gamma: float = 1.0
    futility_z: float = 2.0
    metric: str = "latency_ms"


@dataclass(frozen=True)
class Segment:
    """One fresh worker pair's paired rounds, as log ratios, and their robust summary."""

    log_ratios: tuple[float, ...]
    location: float  # the 20%-trimmed mean
    variance: float  # of that trimmed mean (winsorized variance / ((1 - 2 TRIM)^2 n))
    df: int

    @classmethod
    def of(cls, cand_s: list[float], best_s: list[float]) -> Segment:
        if len(cand_s) != len(best_s) or len(cand_s) < 4:
            raise ValueError("a segment needs at least 4 paired rounds of equal length")
        r = np.log(np.asarray(cand_s, dtype=float) / np.asarray(best_s, dtype=float))
        n = len(r)
        g = int(math.floor(TRIM * n))
        ordered = np.sort(r)
        winsorized = np.clip(r, ordered[g], ordered[n - g - 1])
        variance = float(winsorized.var(ddof=1)) / ((1 - 2 * g / n) ** 2 * n)
        return cls(tuple(float(x) for x in r), float(ordered[g:n - g].mean()), variance, n - 2 * g - 1)


@dataclass(frozen=True)
class Look:
    """The state of the decision after one more segment."""

    segments: int
    rounds: int
    decision: str  # "keep" | "not-faster" | "inconclusive" | "continue"
    estimate_pct: float  # improvement of the primary metric (positive = candidate better)
    lower_pct: float  # the interval at this look's boundary level
    upper_pct: float
    z: float
    boundary: float | None  # None: no keep is possible at this look (fewer than min_segments)
    standard_error: float  # of the mean log ratio
    offset_sd: float  # the between-process standard deviation used (log scale)
    reason: str = ""

    @property
    def final(self) -> bool:
        return self.decision != "continue"

    def as_dict(self) -> dict:
        return asdict(self)


def improvement_pct(log_ratio: float, metric: str) -> float:
    """Improvement of the primary metric implied by a mean log ratio of candidate/best latency."""
    if metric == "images_per_s":
        return (math.exp(-log_ratio) - 1.0) * 100.0
    return (1.0 - math.exp(log_ratio)) * 100.0


def suggested_offset_floor_pct(locations: list[float], confidence: float = 0.9) -> float | None:
    """A floor for `offset_floor_pct` from no-op segments (both sides the same code): the upper `confidence`
    bound of the standard deviation of their trimmed means (chi-square interval). It includes the rounds' own
    noise, so it errs high, which only costs detection; a floor below the real process-to-process spread
    costs false keeps (a 2-segment keep would trust two segments that agree by chance)."""
    if len(locations) < 3:
        return None
    df = len(locations) - 1
    sd = float(np.std(locations, ddof=1))
    upper = sd * math.sqrt(df / chi2.ppf(1 - confidence, df))
    return 100.0 * math.expm1(upper)


def spent(alpha: float, t: float, gamma: float) -> float:
    """Hwang-Shih-DeCani alpha spending: the error allowed up to information fraction t."""
    if abs(gamma) < 1e-9:
        return alpha * t
    return alpha * (1 - math.exp(-gamma * t)) / (1 - math.exp(-gamma))


@lru_cache(maxsize=64)
def boundaries(alpha: float, looks: tuple[float, ...], gamma: float, grid: float = 0.01) -> tuple[float, ...]:
    """One-sided z boundaries c_k for looks at information fractions `looks` (increasing, last = 1).

    Under the null the cumulative statistic S(t) = Z(t) sqrt(t) is a Brownian motion. At each look the
    boundary is set so that the probability of crossing for the first time there equals the alpha spent
    since the previous look; the density of S among the paths not yet stopped is carried on a grid.
    """
    out: list[float] = []
    width = 10.0
    s = np.arange(-width, width + grid, grid)
    density: np.ndarray | None = None
    prev_t, prev_spent = 0.0, 0.0
    for t in looks:
        dt = t - prev_t
        if density is None:
            new = norm.pdf(s, scale=math.sqrt(dt))
        else:
            kernel = norm.pdf(np.arange(-width, width + grid, grid), scale=math.sqrt(dt)) * grid
            new = np.convolve(density, kernel, mode="same")
        target = spent(alpha, t, gamma) - prev_spent
        cum = np.cumsum(new) * grid  # P(S(t) <= s, not stopped before)
        idx = int(np.searchsorted(cum, target))
        c = -s[min(idx, len(s) - 1)] / math.sqrt(t)
        out.append(float(c))
        density = np.where(s > -c * math.sqrt(t), new, 0.0)
        prev_t, prev_spent = t, spent(alpha, t, gamma)
    return tuple(out)


@dataclass
class SequentialTest:
    """Feed segments with `add`; each call returns the look after that segment."""

    design: Design
    segments: list[Segment] = field(default_factory=list)

    def looks(self) -> tuple[float, ...]:
        d = self.design
        return tuple(k / d.max_segments for k in range(d.min_segments, d.max_segments + 1))

    def boundary(self, k: int) -> float | None:
        d = self.design
        if k < d.min_segments:
            return None
        return boundaries(d.alpha, self.looks(), d.spending_gamma)[k - d.min_segments]

    def add(self, cand_s: list[float], best_s: list[float]) -> Look:
        self.segments.append(Segment.of(cand_s, best_s))
        return self.current()

    def _standard_error(self) -> tuple[float, float]:
        """(standard error of the mean of the segments' trimmed means, between-process sd used), log scale."""
        segs = self.segments
        k = len(segs)
        within = float(np.mean([s.variance for s in segs]))
        floor = math.log1p(self.design.offset_floor_pct / 100.0)
        between = floor ** 2
        if k >= 2:
            spread = float(np.var([s.location for s in segs], ddof=1))
            between = max(between, spread - within)
        return math.sqrt((between + within) / k), math.sqrt(between)

    def _quantile(self, z: float) -> float:
        """The Student t quantile with the segments' degrees of freedom at the normal tail of `z`."""
        return float(student.ppf(norm.cdf(z), sum(s.df for s in self.segments)))

    def current(self) -> Look:
        d = self.design
        k = len(self.segments)
        rounds = sum(len(s.log_ratios) for s in self.segments)
        estimate = float(np.mean([s.location for s in self.segments]))
        se, offset_sd = self._standard_error()
        z = estimate / max(se, 1e-12)
        nominal = self.boundary(k)
        c = self._quantile(nominal) if nominal is not None else None
        level = c if c is not None else self._quantile(norm.ppf(1 - d.alpha))
        gain = improvement_pct(estimate, d.metric)
        lo, hi = sorted((improvement_pct(estimate + level * se, d.metric),
                         improvement_pct(estimate - level * se, d.metric)))
        optimistic = improvement_pct(estimate - self._quantile(d.futility_z) * se, d.metric)
        decision, reason = "continue", ""
        if c is not None and z <= -c and gain >= d.min_improvement_pct:
            decision = "keep"
            reason = (f"faster: {gain:+.2f}% [{lo:+.2f}%, {hi:+.2f}%] after {k} segments ({rounds} rounds), "
                      f"z={z:.2f} beyond the boundary -{c:.2f} (alpha {d.alpha:g} over all looks)")
        elif optimistic < d.min_improvement_pct or (c is not None and z >= 0):
            decision = "not-faster"
            why = (f"even {d.futility_z:g} standard errors of luck give {optimistic:+.2f}%"
                   if optimistic < d.min_improvement_pct else "the estimate shows no gain at all")
            reason = (f"not faster by {d.min_improvement_pct:g}%: {gain:+.2f}% [{lo:+.2f}%, {hi:+.2f}%] after "
                      f"{k} segments ({rounds} rounds); {why}")
        elif k >= d.max_segments:
            decision = "inconclusive"
            reason = (f"inconclusive after {rounds} rounds ({k} segments): {gain:+.2f}% [{lo:+.2f}%, {hi:+.2f}%]"
                      + (f"; needs z <= -{c:.2f}, got {z:.2f}" if gain >= d.min_improvement_pct else
                         f"; below the minimum {d.min_improvement_pct:g}%"))
        return Look(k, rounds, decision, gain, lo, hi, float(z), c, se, offset_sd, reason)
