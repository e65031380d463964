"""The sequential performance decision: one estimate over worker pairs of paired rounds, looked at on a
fixed schedule, with the false-keep rate held at `alpha` over all looks (a group-sequential design).

Data. A *pair* is two fresh worker processes (candidate and best) timed for paired rounds; each round
gives one log ratio r = log(candidate time / best time). Within a pair the rounds share the two
processes' offsets (a process can be a few per cent faster than its twin for its whole life), so the
pairs, not the rounds, are the independent units. Two layouts, one statistic:

* *segments* (`pairs = 1`): successive fresh pairs, each timed for `rounds` rounds; a look after each
  pair, keeps from `min_segments` pairs on, at most `max_segments` pairs;
* *concurrent* (`pairs = m > 1`): m pairs started before timing, rounds dealt round-robin over them; a
  look after every `look_every_rounds` rounds per pair from `first_look_rounds` on, up to `rounds`.

Estimate. Per pair the 20%-trimmed mean of its log ratios and the standard error from the winsorized
variance (Tukey & McLaughlin 1963; Wilcox, "Introduction to Robust Estimation and Hypothesis Testing",
ch. 3). Over the k pairs: their mean, with SE^2 = (b + W)/k, where W is the mean of the pairs' squared
standard errors (the rounds' own noise) and b the between-process variance. b = max(B^2, s^2 - W), with
s^2 the spread of the pairs' trimmed means (the experiment's own guard) and B a bound on the
between-process standard deviation ALONE (never on the total spread, which already holds W):

* B starts from a prior: the machine's calibration profile (`dit-ar calibrate`) or the lane's
  `offset_bound_pct`;
* every finished experiment judged against the same best adds its pairs' spread (m - 1 degrees of
  freedom: the effect is the same in all its pairs); once `bound_min_df` are pooled, B is the upper
  `bound_confidence` chi-square bound of the pooled spread minus the pooled W (`pooled_bound`);
* a new best restarts the pool (its processes are others). The state lives in the session
  (`pytest_dit_ar/state/noise.py`).

Degrees of freedom (Satterthwaite): df = (B^2 + W)^2 / (W^2 / nu_W) with nu_W the pairs' summed
trimmed df when B binds (B is used as known), k - 1 when the spread binds. Each z boundary is moved to
the Student t quantile of the same tail probability with these df.

Decision at each look of the schedule:
* KEEP when a keep is allowed at this look, z <= -c_j (t-corrected) *and* the estimated improvement
  reaches `min_improvement_pct`;
* DISCARD early ("not faster") when even the optimistic bound (estimate + `futility_z` t-corrected
  standard errors) is below `futility_target_pct`, or, from information fraction `futility_from` on, when
  the conditional power under the current estimate (the chance of a keep at the last look were the true
  ratio the one estimated now) is below `futility_power`; both stops are non-binding (the boundaries
  ignore them), so they can only lower the false-keep rate;
* after the last look without either: DISCARD as inconclusive, with the estimate and its interval.

Boundaries. Lan-DeMets alpha spending with the Hwang-Shih-DeCani family alpha(t) = alpha (1 - e^{-gamma t}) /
(1 - e^{-gamma}) at information fractions t = rounds so far / rounds at the last look (over the looks where
a keep is allowed), computed by numerical integration of the Brownian motion of the cumulative z statistic
(Jennison & Turnbull, "Group Sequential Methods with Applications to Clinical Trials", 2000, ch. 7 and 19).
In the concurrent layout the real information saturates (the B^2/m term does not shrink with rounds), so
the looks are more correlated than the fractions say: that is conservative.

Interface for the measurement (loop.speed.measurement):

    test = SequentialTest(design, bound)          # design = Design.from_protocol(protocol, metric)
    while True:
        point = test.next_look()                  # LookPoint(pairs, rounds_per_pair, keep_allowed)
        ... time until `point.pairs` pairs hold `point.rounds` rounds each ...
        look = test.update(cand_s, best_s)        # list[list[float]] per pair: ALL rounds so far
        if look.final: break
    spread = test.spread()                        # PairSpread for the session's pool (None: < 2 pairs)

`add(cand_s, best_s)` is the segments layout's shorthand: one more fresh pair, then the look.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import lru_cache

import numpy as np
from scipy.special import chdtri, ndtr, stdtrit

from dit_ar_contract.config import PerfProtocol

TRIM = 0.2  # the fraction trimmed from each end of a pair's log ratios
KEEP, NOT_FASTER, INCONCLUSIVE, CONTINUE = 0, 1, 2, 3
DECISIONS = ("keep", "not-faster", "inconclusive", "continue")

# The prior bound on the between-process sd when neither a calibration nor pooled data exist, per lane kind
# (docs/design/speed-verdict.md): CPU lanes 2.5% (the CPU studies' 90% bounds are 1.5-3%), GPU lanes 2.5% (the
# bound of the pinned H200 blocks, which includes their within noise).
DEFAULT_BOUND_PCT = {"cpu": 2.5, "cuda": 2.5}
MIN_BOUND_PCT = 0.1  # B never falls below this (a quiet CUDA-graph pair still differs by ~0.1%)


_P = PerfProtocol()  # the defaults live in one place: the contract's PerfProtocol


@dataclass(frozen=True)
class Design:
    """The sequential design (built from the lane's PerfProtocol by `from_protocol`, in one place)."""

    alpha: float = _P.alpha
    min_improvement_pct: float = _P.min_improvement_pct
    spending_gamma: float = _P.spending_gamma
    futility_z: float = _P.futility_z
    futility_target_pct: float = _P.futility_target_pct
    futility_power: float = _P.futility_power
    futility_from: float = _P.futility_from
    metric: str = "latency_ms"
    pairs: int = _P.pairs  # 1: successive fresh pairs (segments); m > 1: m concurrent pairs, rounds round-robin
    rounds: int = _P.rounds  # segments: rounds per pair; concurrent: rounds per pair at the last look
    min_segments: int = _P.min_segments
    max_segments: int = _P.max_segments
    first_look_rounds: int = _P.first_look_rounds
    look_every_rounds: int = _P.look_every_rounds

    @classmethod
    def from_protocol(cls, protocol: PerfProtocol, metric: str, max_segments: int | None = None) -> Design:
        """The design of a lane's PerfProtocol (dit_ar_contract.config); `max_segments` caps the segments
        (the baseline's A/A run takes one)."""
        p = protocol
        top = max_segments or p.max_segments
        return cls(alpha=p.alpha, min_improvement_pct=p.min_improvement_pct, spending_gamma=p.spending_gamma,
                   futility_z=p.futility_z, futility_target_pct=p.futility_target_pct,
                   futility_power=p.futility_power, futility_from=p.futility_from, metric=metric,
                   pairs=p.pairs, rounds=p.rounds, min_segments=min(p.min_segments, top), max_segments=top,
                   first_look_rounds=min(p.first_look_rounds, p.rounds), look_every_rounds=p.look_every_rounds)

    @property
    def concurrent(self) -> bool:
        return self.pairs > 1

    def schedule(self) -> tuple[LookPoint, ...]:
        """Every look: how many pairs with how many rounds each, and whether a keep is possible there."""
        if not self.concurrent:
            return tuple(LookPoint(k, self.rounds, k >= self.min_segments) for k in range(1, self.max_segments + 1))
        rs = list(range(self.first_look_rounds, self.rounds + 1, max(1, self.look_every_rounds)))
        if rs[-1] != self.rounds:
            rs.append(self.rounds)
        return tuple(LookPoint(self.pairs, r, True) for r in rs)

    def fractions(self) -> tuple[float, ...]:
        """Information fractions (rounds / rounds at the last look) of the looks where a keep is allowed."""
        pts = self.schedule()
        total = pts[-1].pairs * pts[-1].rounds
        return tuple(p.pairs * p.rounds / total for p in pts if p.keep_allowed)

    def z_boundaries(self) -> dict[int, float]:
        """Look index -> nominal z boundary, for the looks where a keep is allowed."""
        keep = [j for j, p in enumerate(self.schedule()) if p.keep_allowed]
        return dict(zip(keep, boundaries(self.alpha, self.fractions(), self.spending_gamma)))

    @property
    def max_rounds(self) -> int:
        last = self.schedule()[-1]
        return last.pairs * last.rounds


@dataclass(frozen=True)
class LookPoint:
    pairs: int
    rounds: int  # per pair
    keep_allowed: bool


@dataclass(frozen=True)
class OffsetBound:
    """B: an upper bound on the between-process standard deviation alone (log scale)."""

    sd: float
    df: float = math.inf  # inf: used as known (a prior); the pool's chi-square df otherwise
    source: str = "default"

    @property
    def pct(self) -> float:
        return 100.0 * math.expm1(self.sd)

    @classmethod
    def of_pct(cls, pct: float, source: str = "default", df: float = math.inf) -> OffsetBound:
        return cls(math.log1p(max(pct, MIN_BOUND_PCT) / 100.0), df, source)

    @classmethod
    def default(cls, device: str) -> OffsetBound:
        kind = "cpu" if device == "cpu" else "cuda"
        return cls.of_pct(DEFAULT_BOUND_PCT[kind], f"default for {kind} lanes")


@dataclass(frozen=True)
class PairSpread:
    """One experiment's contribution to the session's pool: its pairs' spread (m - 1 df)."""

    pairs: int
    spread_var: float  # variance (ddof 1) of the pairs' trimmed means, log scale
    within_var: float  # mean of the pairs' squared standard errors (W)

    @classmethod
    def of(cls, r: np.ndarray) -> PairSpread:
        """The spread of `r`, (pairs, rounds) log ratios: of the pairs' trimmed means, and their mean W."""
        loc, var, _ = trimmed(r[None])
        return cls(r.shape[0], float(loc.var(1, ddof=1)[0]), float(var.mean(1)[0]))

    @property
    def offset_sd(self) -> float:
        """The between-pair sd alone (log scale): the spread less what the rounds' own noise gives it."""
        return math.sqrt(max(self.spread_var - self.within_var, 0.0))

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def pooled_bound(prior: OffsetBound, spreads: list[PairSpread], confidence: float = 0.9,
                 min_df: int = 7) -> OffsetBound:
    """B from every experiment against the same best: sqrt(upper `confidence` chi-square bound of the pooled
    spread minus the pooled within variance). The prior until `min_df` degrees of freedom are pooled."""
    used = [s for s in spreads if s.pairs >= 2 and math.isfinite(s.spread_var)]
    nu = sum(s.pairs - 1 for s in used)
    if nu < max(min_df, 1):
        return prior
    total = sum((s.pairs - 1) * s.spread_var for s in used)
    within = sum((s.pairs - 1) * s.within_var for s in used) / nu
    upper = total / chdtri(nu, confidence) - within  # chdtri(nu, c): the chi-square's lower 1 - c quantile
    floor = math.log1p(MIN_BOUND_PCT / 100.0)
    return OffsetBound(max(math.sqrt(max(upper, 0.0)), floor), float(nu),
                       f"pooled from {len(used)} experiments ({nu} df)")


def improvement_pct(log_ratio: float, metric: str) -> float:
    """Improvement of the primary metric implied by a mean log ratio of candidate/best latency."""
    if metric == "images_per_s":
        return (math.exp(-log_ratio) - 1.0) * 100.0
    return (1.0 - math.exp(log_ratio)) * 100.0


def _improvement(log_ratio: np.ndarray, metric: str) -> np.ndarray:
    if metric == "images_per_s":
        return np.expm1(-log_ratio) * 100.0
    return -np.expm1(log_ratio) * 100.0


def _normal_pdf(x: np.ndarray, sd: float) -> np.ndarray:
    """The N(0, sd^2) density (written out: scipy.stats costs ~1.3 s of import in every experiment's harness)."""
    return np.exp(-0.5 * (x / sd) ** 2) / (sd * math.sqrt(2 * math.pi))


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
            new = _normal_pdf(s, math.sqrt(dt))
        else:
            kernel = _normal_pdf(np.arange(-width, width + grid, grid), math.sqrt(dt)) * grid
            new = np.convolve(density, kernel, mode="same")
        target = spent(alpha, t, gamma) - prev_spent
        cum = np.cumsum(new) * grid  # P(S(t) <= s, not stopped before)
        idx = int(np.searchsorted(cum, target))
        c = -s[min(idx, len(s) - 1)] / math.sqrt(t)
        out.append(float(c))
        density = np.where(s > -c * math.sqrt(t), new, 0.0)
        prev_t, prev_spent = t, spent(alpha, t, gamma)
    return tuple(out)


# -- the statistic, vectorised over experiments (the simulations run exactly this code) ----------------
def trimmed(r: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(20%-trimmed means, their variance estimates, df per pair) along the last axis."""
    parts = pair_parts(r)
    return parts.loc, parts.var, parts.df


@dataclass(frozen=True)
class PairParts:
    """Per pair (arrays of shape (N, k)): trimmed mean, its variance, and the lag-1 sums of the winsorized
    rounds (pooled over pairs into one autocorrelation: rounds that dwell in one machine mode are not
    independent, and W is inflated by (1 + rho) / (1 - rho) for it)."""

    loc: np.ndarray
    var: np.ndarray
    df: int
    lag: np.ndarray
    sq: np.ndarray

    def first(self, k: int) -> PairParts:
        return PairParts(self.loc[:, :k], self.var[:, :k], self.df, self.lag[:, :k], self.sq[:, :k])


def pair_parts(r: np.ndarray) -> PairParts:
    n = r.shape[-1]
    g = int(math.floor(TRIM * n))
    ordered = np.sort(r, axis=-1)
    loc = ordered[..., g:n - g].mean(-1)
    wins = np.clip(r, ordered[..., g:g + 1], ordered[..., n - g - 1:n - g])
    var = wins.var(-1, ddof=1) / ((1 - 2 * g / n) ** 2 * n)
    centred = wins - wins.mean(-1, keepdims=True)
    lag = (centred[..., 1:] * centred[..., :-1]).sum(-1)
    return PairParts(loc, var, n - 2 * g - 1, lag, (centred ** 2).sum(-1))


@dataclass(frozen=True)
class LookStats:
    """The statistic at one look for N experiments at once (arrays of shape (N,))."""

    estimate: np.ndarray
    se: np.ndarray
    z: np.ndarray
    df: np.ndarray
    between: np.ndarray  # the between-process variance used, b = max(B^2, s^2 - W)
    spread_var: np.ndarray
    within_var: np.ndarray


def look_stats(r: np.ndarray, bound_sd: np.ndarray | float) -> LookStats:
    """r: (N, k, n) log ratios (k pairs of n rounds); bound_sd: B per experiment (log scale)."""
    return combine(pair_parts(r), bound_sd)


def combine(parts: PairParts, bound_sd: np.ndarray | float) -> LookStats:
    """The estimate over the pairs, SE^2 = (max(B^2, s^2 - W) + W)/k and its Satterthwaite df."""
    N, k = parts.loc.shape
    est = parts.loc.mean(1)
    rho = np.clip(parts.lag.sum(1) / np.maximum(parts.sq.sum(1), 1e-300), 0.0, 0.6)
    W = parts.var.mean(1) * (1 + rho) / (1 - rho)
    s2 = parts.loc.var(1, ddof=1) if k >= 2 else np.full(N, np.nan)
    B2 = np.broadcast_to(np.asarray(bound_sd, float) ** 2, (N,))
    guard = np.where(np.isfinite(s2), s2 - W, -np.inf)
    b = np.maximum(B2, guard)
    se = np.sqrt((b + W) / k)
    nu_w = max(k * parts.df, 1)
    df = np.where(guard > B2, max(k - 1, 1), (B2 + W) ** 2 / np.maximum(W ** 2 / nu_w, 1e-300))
    z = est / np.maximum(se, 1e-12)
    return LookStats(est, se, z, np.minimum(df, 1e7), b, s2, W)


def _t_quantile(p: float | np.ndarray, df: float | np.ndarray) -> np.ndarray:
    """The Student t quantile (scipy.special: the array path, ~100x faster than scipy.stats per call)."""
    return stdtrit(df, p)


def final_fraction(stats: LookStats, design: Design, look: int) -> np.ndarray:
    """The information fraction t = SE(last look)^2 / SE(now)^2 the test has reached at look `look`, projected
    from this look's variance parts: segments, k / K pairs; concurrent, (b + W r/R) / (b + W) (the
    between-process part b does not shrink with rounds)."""
    pts = design.schedule()
    now, last = pts[look], pts[-1]
    if not design.concurrent:
        return np.full(len(stats.estimate), now.pairs / last.pairs)
    return (stats.between + stats.within_var * now.rounds / last.rounds) / (stats.between + stats.within_var)


def conditional_power(stats: LookStats, design: Design, look: int) -> np.ndarray:
    """The chance of a keep at the last look if the true ratio were the one estimated now (stochastic
    curtailment under the current trend: Jennison & Turnbull 2000, ch. 10): with Z' = -z and t the
    information fraction, P = Phi((Z' / sqrt(t) - c_K) / sqrt(1 - t)), c_K the last look's nominal boundary
    (the t-corrected one is larger, so this overstates the chance: the stop it drives is conservative)."""
    zb = design.z_boundaries()
    c_last = zb[max(zb)]
    t = np.clip(final_fraction(stats, design, look), 1e-9, 1.0)
    pts = design.schedule()
    if pts[look].pairs * pts[look].rounds < design.futility_from * design.max_rounds:
        return np.full(len(t), np.nan)  # too early for this stop (nan compares false)
    with np.errstate(divide="ignore", invalid="ignore"):
        arg = (-stats.z / np.sqrt(t) - c_last) / np.sqrt(np.maximum(1.0 - t, 1e-12))
    return np.where(t >= 1.0, np.nan, ndtr(arg))


def decide(stats: LookStats, design: Design, z_boundary: float | None, last: bool,
           look: int | None = None) -> np.ndarray:
    """Decision codes (KEEP, NOT_FASTER, INCONCLUSIVE, CONTINUE) for the experiments at one look (`look`: its
    index in the schedule, for the conditional-power stop; None: that stop is not used)."""
    gain = _improvement(stats.estimate, design.metric)
    keep = np.zeros(len(gain), bool)
    if z_boundary is not None:
        c = _t_quantile(ndtr(z_boundary), stats.df)
        keep = (stats.z <= -c) & (gain >= design.min_improvement_pct)
    notfaster = _optimistic(stats, design) < design.futility_target_pct
    if design.futility_power > 0 and look is not None and not last:
        notfaster |= conditional_power(stats, design, look) < design.futility_power
    out = np.where(keep, KEEP, np.where(notfaster, NOT_FASTER, INCONCLUSIVE if last else CONTINUE))
    return out


def _optimistic(stats: LookStats, design: Design) -> np.ndarray:
    """The improvement the estimate gives with `futility_z` (t-corrected) standard errors of luck."""
    q = _t_quantile(ndtr(design.futility_z), stats.df)
    return _improvement(stats.estimate - q * stats.se, design.metric)


@dataclass(frozen=True)
class Verdicts:
    """Outcome of N simulated (or replayed) experiments."""

    decision: np.ndarray  # codes
    rounds: np.ndarray  # paired rounds used, all pairs together
    look: np.ndarray
    spread: list[PairSpread | None]


def run_experiments(r: np.ndarray, design: Design, bound_sd: np.ndarray | float) -> Verdicts:
    """Decisions of the design on r: (N, pairs, rounds) log ratios in timing order (segments layout: (N,
    max_segments, rounds)), each experiment with its own B."""
    whole = None if design.concurrent else segment_parts(r, design)
    return judge_looks(r.shape[0], design, lambda p: combine(
        whole.first(p.pairs) if whole else pair_parts(r[:, :p.pairs, :p.rounds]), bound_sd))


def segment_parts(r: np.ndarray, design: Design) -> PairParts:
    """Every segment's parts at once (segments layout): a look at k pairs takes the first k (`PairParts.first`)."""
    return pair_parts(r[:, :design.schedule()[-1].pairs, :design.rounds])


def judge_looks(N: int, design: Design, stats_at: Callable[[LookPoint], LookStats]) -> Verdicts:
    """The decisions of N experiments look by look, the statistic at each look from `stats_at` (the verdict's
    own `combine`, or a simulation's oracle that knows the true variance)."""
    points = design.schedule()
    zb = design.z_boundaries()
    decision = np.full(N, CONTINUE)
    rounds = np.zeros(N, int)
    look = np.zeros(N, int)
    s2 = np.full(N, np.nan)
    W = np.full(N, np.nan)
    for j, p in enumerate(points):
        st = stats_at(p)
        d = decide(st, design, zb.get(j), j == len(points) - 1, j)
        new = (decision == CONTINUE) & (d != CONTINUE)
        decision[new], rounds[new], look[new] = d[new], p.pairs * p.rounds, j
        s2[new], W[new] = st.spread_var[new], st.within_var[new]
    pairs = np.array([points[j].pairs for j in look])
    spread = [PairSpread(int(m), float(a), float(w)) if m >= 2 else None for m, a, w in zip(pairs, s2, W)]
    return Verdicts(decision, rounds, look, spread)


# -- one experiment, look by look ------------------------------------------------------------------
def interval_text(estimate_pct: float, lower_pct: float, upper_pct: float, df: float, digits: int = 2) -> str:
    """An estimate with its interval, or with "no interval yet" below two degrees of freedom."""
    if df < 2:
        return f"{estimate_pct:+.{digits}f}% (no interval yet: {df:.1f} degrees of freedom)"
    return f"{estimate_pct:+.{digits}f}% [{lower_pct:+.{digits}f}%, {upper_pct:+.{digits}f}%]"


@dataclass(frozen=True)
class Look:
    """The state of the decision after one more look."""

    segments: int  # pairs used so far
    rounds: int  # paired rounds so far, all pairs together
    decision: str  # "keep" | "not-faster" | "inconclusive" | "continue"
    estimate_pct: float  # improvement of the primary metric (positive = candidate better)
    lower_pct: float  # the interval at this look's boundary level
    upper_pct: float
    z: float
    boundary: float | None  # None: no keep is possible at this look
    standard_error: float  # of the mean log ratio
    offset_sd: float  # the between-process standard deviation used (log scale)
    reason: str = ""
    df: float = math.inf
    bound_pct: float = float("nan")  # B, the session's bound on the between-process sd
    bound_source: str = ""
    look_index: int = 0
    optimistic_pct: float = float("nan")  # the estimate with `futility_z` standard errors of luck
    stop: str = ""  # a not-faster look: "optimism" (even the optimistic bound is below target) or "power"

    @property
    def final(self) -> bool:
        return self.decision != "continue"

    def interval_text(self, digits: int = 2) -> str:
        """The estimate with its interval at this look's level. With fewer than two degrees of freedom (two
        pairs when the pairs' own spread binds) the t quantile is so large that the interval says nothing
        (the H200's '+59.8% [-45041.6%, +100.0%]'), so it is named instead of printed."""
        return interval_text(self.estimate_pct, self.lower_pct, self.upper_pct, self.df, digits)

    def figure_text(self, digits: int = 2) -> str:
        """The estimate with the bound its decision rests on, so that the figure and the reason agree: a stop for
        lack of optimism gives its optimistic bound (the keep test's interval is wider, at another level, and would
        read as contradicting it); every other look its interval."""
        if self.stop == "optimism":
            return f"{self.estimate_pct:+.{digits}f}%, at most {self.optimistic_pct:+.{digits}f}% with luck"
        return self.interval_text(digits)

    def as_dict(self) -> dict:
        """The look as perf.json holds it; a look read from a record written before `optimistic_pct` and `stop`
        existed writes back without them."""
        data = asdict(self)
        if math.isnan(self.optimistic_pct):
            del data["optimistic_pct"]
        if not self.stop:
            del data["stop"]
        return data


@dataclass
class SequentialTest:
    """Feed the data of each look of `design.schedule()` with `update` (or one segment with `add`)."""

    design: Design
    bound: OffsetBound = field(default_factory=lambda: OffsetBound.of_pct(DEFAULT_BOUND_PCT["cuda"]))
    pairs: list[tuple[list[float], list[float]]] = field(default_factory=list)
    looks_done: int = 0
    last: Look | None = None

    def next_look(self) -> LookPoint | None:
        """The data the next look needs (None: the test has decided)."""
        points = self.design.schedule()
        if (self.last is not None and self.last.final) or self.looks_done >= len(points):
            return None
        return points[self.looks_done]

    def update(self, cand_s: list[list[float]], best_s: list[list[float]]) -> Look:
        """The look at `next_look()`: every pair's rounds so far (per pair, in timing order)."""
        point = self.next_look()
        if point is None:
            raise ValueError("the test has already decided")
        if len(cand_s) != point.pairs or len(best_s) != point.pairs:
            raise ValueError(f"look {self.looks_done + 1} needs {point.pairs} pairs, got {len(cand_s)}")
        for c, b in zip(cand_s, best_s):
            if len(c) != len(b) or len(c) < point.rounds:
                raise ValueError(f"look {self.looks_done + 1} needs {point.rounds} paired rounds per pair")
        self.pairs = [(list(c[:point.rounds]), list(b[:point.rounds])) for c, b in zip(cand_s, best_s)]
        look = self._look(self.looks_done)
        self.looks_done += 1
        self.last = look
        return look

    def add(self, cand_s: list[float], best_s: list[float]) -> Look:
        """Segments layout: one more fresh pair's rounds, then its look."""
        if self.design.concurrent:
            raise ValueError("add() is the segments layout's; a concurrent design takes update()")
        if len(cand_s) != len(best_s) or len(cand_s) < 4:
            raise ValueError("a segment needs at least 4 paired rounds of equal length")
        pairs = self.pairs + [(list(cand_s), list(best_s))]
        return self.update([c for c, _ in pairs], [b for _, b in pairs])

    def log_ratios(self) -> np.ndarray:
        return np.log(np.array([np.asarray(c, float) / np.asarray(b, float) for c, b in self.pairs]))

    def spread(self) -> PairSpread | None:
        """This experiment's pairs' spread for the session's pool (None with fewer than 2 pairs)."""
        if len(self.pairs) < 2:
            return None
        st = look_stats(self.log_ratios()[None], self.bound.sd)
        return PairSpread(len(self.pairs), float(st.spread_var[0]), float(st.within_var[0]))

    def current(self) -> Look:
        if self.last is None:
            raise ValueError("no look yet")
        return self.last

    def _look(self, j: int) -> Look:
        d = self.design
        points = d.schedule()
        r = self.log_ratios()
        st = look_stats(r[None], self.bound.sd)
        nominal = d.z_boundaries().get(j)
        code = int(decide(st, d, nominal, j == len(points) - 1, j)[0])
        est, se, z, df = float(st.estimate[0]), float(st.se[0]), float(st.z[0]), float(st.df[0])
        c = float(_t_quantile(ndtr(nominal), df)) if nominal is not None else None
        level = c if c is not None else float(_t_quantile(1 - d.alpha, df))
        gain = improvement_pct(est, d.metric)
        lo, hi = sorted((improvement_pct(est + level * se, d.metric), improvement_pct(est - level * se, d.metric)))
        k, rounds = len(self.pairs), int(r.size)
        where = f"after {rounds} rounds in {k} pairs"
        interval = interval_text(gain, lo, hi, df)
        reason, stop, optimistic = "", "", float(_optimistic(st, d)[0])
        if code == KEEP:
            reason = (f"faster: {interval} {where}, z={z:.2f} beyond the boundary -{c:.2f} "
                      f"(alpha {d.alpha:g} over all looks; offset bound {self.bound.pct:.2f}%, {self.bound.source})")
        elif code == NOT_FASTER:
            stop = "optimism" if optimistic < d.futility_target_pct else "power"
            if stop == "optimism":  # the stop's own one-sided bound, not the keep test's wider interval
                reason = (f"not faster by {d.futility_target_pct:g}%: {gain:+.2f}% {where}; even {d.futility_z:g} "
                          f"standard errors of luck give at most {optimistic:+.2f}%, below {d.futility_target_pct:g}%")
            else:
                power = float(conditional_power(st, d, j)[0])
                reason = (f"unlikely to be kept: {interval} {where}; were the true change {gain:+.2f}%, a keep by "
                          f"the last look would have a {100 * power:.1f}% chance (below {100 * d.futility_power:g}%)")
        elif code == INCONCLUSIVE:
            reason = (f"inconclusive {where}: {interval}"
                      + (f"; needs z <= -{c:.2f}, got {z:.2f}" if gain >= d.min_improvement_pct else
                         f"; below the minimum {d.min_improvement_pct:g}%"))
        return Look(k, rounds, DECISIONS[code], gain, lo, hi, z, c, se, math.sqrt(float(st.between[0])), reason,
                    df, self.bound.pct, self.bound.source, j, optimistic, stop)
