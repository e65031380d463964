"""What a lane's measured noise lets the speed verdict see, and what to change when it cannot see enough.

Inputs are a calibration's figures (`MeasuredNoise`): the per-round variance sigma_w^2 of the log ratios, the
between-process sd sigma_b, and the bound B the calibration gave. Two normal approximations of the verdict
(perf_suite.sequential), both checked against whole simulated sessions in lab/studies/eager_power.py:

* power: a true win delta = -log(1 - e) is kept by the last look with probability
  Phi((delta - max(c_K SE_K, delta_min)) / SE_K), SE_K^2 = (B^2 + sigma_w^2 / n) / K for K pairs of n rounds (the
  design's budget), c_K the last look's boundary and delta_min the log of `min_improvement_pct`;
* the bound a calibration of P pairs of n rounds gives: B^2 = (sigma_b^2 + sigma_w^2/n) nu / chi2_{1-c}(nu) -
  sigma_w^2/n with nu = P - 1. The rounds' own noise leaks into B through the chi-square factor, so longer and
  more calibration pairs give a smaller B even when sigma_b is zero.

`advice` searches the levers in order (a calibration with more or longer pairs, then the design's rounds per
pair and pairs) for the cheapest setting that reaches the targets, and says which knob to set to what.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from scipy.special import chdtri, ndtr

from .sequential import Design

TARGETS = ((10.0, 0.8), (5.0, 0.5))  # (true win %, the share of such wins the lane must keep)
CAL_PAIRS = (8, 12, 16, 24, 32)
CAL_ROUNDS = (16, 24, 32, 48, 64, 96)
DESIGN_ROUNDS = (16, 24, 32, 48)
DESIGN_PAIRS = (12, 16, 20, 24)
# the approximation runs up to ~10 points above whole simulated sessions (lab/notebook/eager-power.md): a
# suggested change must reach each target with this much to spare
MARGIN = 0.08


@dataclass(frozen=True)
class MeasuredNoise:
    """A calibration's figures (log scale)."""

    round_var: float  # sigma_w^2: variance of one round's log ratio
    offset_sd: float  # sigma_b: the between-process sd's point estimate
    bound_sd: float  # B as calibrated
    confidence: float = 0.9  # the bound's chi-square level (performance.bound_confidence)

    def bound_after(self, pairs: int, rounds: int) -> float:
        """The B a calibration of `pairs` pairs of `rounds` rounds gives on this noise (typical value)."""
        nu = pairs - 1
        w = self.round_var / rounds
        upper = (self.offset_sd ** 2 + w) * nu / chdtri(nu, self.confidence) - w
        return math.sqrt(max(upper, 0.0))


def power(effect_pct: float, bound_sd: float, round_var: float, design: Design) -> float:
    """The chance a true `effect_pct` win is kept by the design's last look (normal approximation)."""
    delta = -math.log1p(-effect_pct / 100.0)
    c = max(design.z_boundaries().values())
    last = design.schedule()[-1]
    se = math.sqrt((bound_sd ** 2 + round_var / last.rounds) / last.pairs)
    floor = -math.log1p(-design.min_improvement_pct / 100.0)  # a keep also needs the estimate past this
    return float(ndtr((delta - max(c * se, floor)) / se))


def powers(bound_sd: float, round_var: float, design: Design) -> dict[float, float]:
    return {e: power(e, bound_sd, round_var, design) for e, _ in TARGETS}


def reaches(p: dict[float, float], margin: float = 0.0) -> bool:
    return all(p[e] >= min(need + margin, 0.99) for e, need in TARGETS)


@dataclass(frozen=True)
class Change:
    """One way to reach the targets: the knobs, their values, what they cost and what they give."""

    knobs: str  # e.g. "calibrate with --pairs 8 --rounds 48 (performance.calibration_pairs, ...)"
    bound_pct: float
    powers: dict[float, float]
    cost_s: float  # seconds of timed rounds it adds (calibration) or the budget's timed seconds (design)

    def text(self) -> str:
        got = ", ".join(f"a {e:g}% win {100 * p:.0f}%" for e, p in self.powers.items())
        return f"{self.knobs}: B about {self.bound_pct:.2f}%, then {got}"


def _with(design: Design, rounds: int, pairs: int) -> Design:
    return dataclasses.replace(design, rounds=rounds, max_segments=pairs, min_segments=min(design.min_segments, pairs))


def calibration_change(noise: MeasuredNoise, design: Design, round_s: float) -> Change | None:
    """The cheapest calibration (pairs x rounds) whose typical B lets the current design reach the targets."""
    options = sorted(((p, n) for p in CAL_PAIRS for n in CAL_ROUNDS), key=lambda pn: pn[0] * pn[1])
    for p, n in options:
        b = noise.bound_after(p, n)
        got = powers(b, noise.round_var, design)
        if reaches(got, MARGIN):
            timed = p * n * round_s
            budget = 100 * math.ceil((1.3 * timed + 60 + 10 * p) / 100)  # start-up, warm-up, checks
            return Change(f"calibrate again with --pairs {p} --rounds {n} --budget-s {budget} "
                          f"(performance.calibration_pairs {p}, calibration_rounds {n}; about {timed:.0f} s of "
                          "timed rounds)",
                          100 * math.expm1(b), got, timed)
    return None


def design_change(noise: MeasuredNoise, design: Design, round_s: float) -> Change | None:
    """The smallest budget (rounds per pair x pairs) that reaches the targets with the best B a calibration of
    32 pairs of 96 rounds would give (or the current B when it is smaller)."""
    if design.concurrent:
        return None  # its budget is the concurrent pairs' rounds: not searched here
    longest = noise.bound_after(CAL_PAIRS[-1], CAL_ROUNDS[-1])
    b = min(noise.bound_sd, longest)
    first = (f"calibrate with --pairs {CAL_PAIRS[-1]} --rounds {CAL_ROUNDS[-1]}, then "
             if longest < noise.bound_sd else "")
    now = design.schedule()[-1]
    options = sorted(((n, k) for n in DESIGN_ROUNDS for k in DESIGN_PAIRS if n * k > now.rounds * now.pairs),
                     key=lambda nk: nk[0] * nk[1])
    for n, k in options:
        got = powers(b, noise.round_var, _with(design, n, k))
        if reaches(got, MARGIN):
            return Change(f"{first}raise the budget to {n * k} paired rounds: performance.rounds {n}, max_segments {k} "
                          f"(about {n * k * round_s:.0f} s of timed rounds at most; no-ops still stop early)",
                          100 * math.expm1(b), got, n * k * round_s)
    return None


def needed_round_sd(noise: MeasuredNoise, design: Design) -> float:
    """The per-round sd (log scale) at which the current design reaches the targets, with B from a calibration
    of 16 pairs of 48 rounds on that noise: the quieter lane the remaining levers must make."""
    lo, hi = 1e-4, math.sqrt(noise.round_var)
    for _ in range(50):
        mid = (lo + hi) / 2
        quiet = dataclasses.replace(noise, round_var=mid ** 2)
        if reaches(powers(quiet.bound_after(16, 48), mid ** 2, design), MARGIN):
            lo = mid
        else:
            hi = mid
    return lo


def statement(noise: MeasuredNoise, design: Design, round_s: float, one_core: bool) -> list[str]:
    """The power on this lane in plain words and, when a target is missed, what to change (lines a user reads).
    `round_s`: seconds of one paired round (both sides); `one_core`: both sides of a timed pair share one core."""
    last = design.schedule()[-1]
    got = powers(noise.bound_sd, noise.round_var, design)
    parts = [f"a {e:g}% win {100 * got[e]:.0f}% ({'reaches' if got[e] >= need else 'below'} {100 * need:.0f}%)"
             for e, need in TARGETS]
    bound_pct, round_pct = 100 * math.expm1(noise.bound_sd), 100 * math.sqrt(noise.round_var)
    lines = [f"power within the design's {design.max_rounds} paired rounds ({last.rounds} rounds x {last.pairs} "
             f"pairs, B {bound_pct:.2f}%, effective per-round sd {round_pct:.1f}%): " + ", ".join(parts)
             + f"; a no-op stays kept at most {100 * design.alpha:g}% of the time while B bounds the "
             "between-process sd"]
    if reaches(got):
        lines.append("this lane reaches the targets (a 10% win kept >= 80%, a 5% win >= 50%)")
        return lines
    lines.append("this lane does not reach the targets (a 10% win kept >= 80%, a 5% win >= 50%); to change:")
    if not one_core:
        lines.append("- pin both sides of a timed pair to one core: performance.pair_cores \"one\" (an eager GPU "
                     "worker follows its core's speed; on one core both sides share it), then calibrate again")
    cal = calibration_change(noise, design, round_s)
    if cal is not None:
        lines.append(f"- {cal.text()}")
        return lines
    des = design_change(noise, design, round_s)
    if des is not None:
        lines.append(f"- {des.text()}")
    need = needed_round_sd(noise, design)
    if need > 2e-4:
        lines.append(f"- or make the rounds quieter: this design reaches the targets at a per-round sd of about "
                     f"{100 * need:.1f}% (now {100 * math.sqrt(noise.round_var):.1f}%); a CUDA-graphed best "
                     "measured 1-5% on the H200")
    else:
        lines.append(f"- the between-process sd ({100 * math.expm1(noise.offset_sd):.2f}%) alone keeps B too large "
                     "for this design, however quiet the rounds: calibrate again with more pairs to check it, and "
                     "look for what differs between fresh workers (cores, other load, clocks)")
    return lines
