"""The machine's noise profile from A/A pairs (loop/speed/aa_pairs.py), and what it implies.

`collect` times the best tree against itself in `pairs` fresh pairs of `rounds` rounds (plus optional arms
whose best side sleeps a fraction of the latency: known speedups); `profile_of` turns the collected
segments into a `NoiseProfile` (state.noise): the pairs' spread, the bound B it gives (the statistics'
prior), the per-round noise, and the rounds a win of 3, 5 or 10% needs for 80% power on the lane's design.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import norm

from dit_ar_contract.config import PerfProtocol
from perf_suite.power import MeasuredNoise, statement
from perf_suite.sequential import Design, OffsetBound, improvement_pct, pooled_bound, trimmed
from perf_suite.studies import NULL, StudyArm, StudyPair, StudyResults

from ...state.noise import NoiseProfile
from .aa_pairs import StudyPlan, aa_spread, pooled, run_study

POWER_EFFECTS = (3.0, 5.0, 10.0)
POWER = 0.8


@dataclass(frozen=True)
class Collected:
    """What one calibration run measured (the study's typed results), and whether it finished."""

    results: StudyResults
    pairs_wanted: int
    pairs_per_speedup: int = 2

    @property
    def null(self) -> tuple[StudyPair, ...]:
        return self.results.null

    @property
    def complete(self) -> bool:
        return (not self.results.stopped and len(self.null) >= self.pairs_wanted
                and all(len(arm.pairs) >= self.pairs_per_speedup for arm in self.results.speedup_arms()))


def collect(plan: StudyPlan) -> Collected:
    """A/A pairs (and 2 pairs per injected speedup) in fresh pairs (aa_pairs.run_study), stopped at the plan's deadline
    (`StudyPlan.calibration`: the verb's budget)."""
    return Collected(run_study(plan), plan.null_pairs, plan.pairs_per_speedup)


def rounds_needed(bound: OffsetBound, within_var: float, rounds: int, design: Design, effect_pct: float) -> int | None:
    """Paired rounds (all pairs together) for `POWER` detection of a true `effect_pct` win on `design`: the
    final SE must reach delta / (c + z_power) with c the last look's boundary (the segments layout:
    Var = (B^2 + sigma_w^2/n)/k; concurrent: the same with k = pairs). None: not reachable within the design."""
    delta = -math.log1p(-effect_pct / 100.0)
    c = max(design.z_boundaries().values())
    tau2 = (delta / (c + norm.ppf(POWER))) ** 2
    per_round = within_var * rounds  # sigma_w^2, from the calibration's pairs of `rounds` rounds
    if design.concurrent:
        room = design.pairs * tau2 - bound.sd ** 2
        if room <= 0:
            return None
        n = math.ceil(per_round / room)
        return design.pairs * n if n <= design.rounds else None
    k = math.ceil((bound.sd ** 2 + per_round / design.rounds) / tau2)
    return k * design.rounds if k <= design.max_segments else None


def profile_of(collected: Collected, lane_id: str, best_commit: str, protocol: PerfProtocol, metric: str,
               measured: str | None = None) -> NoiseProfile:
    null = collected.null
    rounds = min(len(s.cand_s) for s in null)
    spread = aa_spread(null, rounds)
    assert spread is not None, "a profile needs at least two A/A pairs"
    prior = OffsetBound.of_pct(100.0, "none")  # replaced: one calibration's df always count (min_df 1)
    bound = pooled_bound(prior, [spread], protocol.bound_confidence, 1)
    r = collected.results.arms[NULL].log_ratios(rounds)
    loc, _, _ = trimmed(r[None])
    residual = (r - loc[0][:, None]).ravel()
    design = Design.from_protocol(protocol, metric)
    needs = {f"{e:g}": rounds_needed(bound, spread.within_var, rounds, design, e) for e in POWER_EFFECTS}
    injected = {}
    for arm in collected.results.speedup_arms():
        est = pooled(arm.pairs, design, rounds)
        if est is not None:
            injected[arm.name] = est.estimate_pct
    latency = float(np.median([t for s in null for t in s.best_s])) * 1e3
    return NoiseProfile(lane_id, measured or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), best_commit,
                        spread.pairs, rounds, spread, bound.pct,
                        100 * math.expm1(spread.offset_sd),
                        100 * float(np.median(np.abs(residual)) / 0.6745), latency, needs, injected)


def measured_noise(profile: NoiseProfile, confidence: float = 0.9) -> MeasuredNoise:
    """The profile's figures as perf_suite.power reads them (log scale; the per-round variance is the pairs'
    trimmed-mean variance times their rounds, so the trimming's efficiency is in it)."""
    return MeasuredNoise(profile.spread.within_var * profile.rounds, math.log1p(profile.sigma_b_pct / 100.0),
                         math.log1p(profile.bound_pct / 100.0), confidence)


def describe(profile: NoiseProfile, design: Design, one_core: bool = True, confidence: float = 0.9) -> list[str]:
    """What the profile means, in lines a user reads: the noise, the rounds a win needs, and the power within
    the design's budget with what to change when the lane misses the targets (perf_suite.power)."""
    lines = [f"{profile.pairs} A/A pairs x {profile.rounds} rounds of {profile.lane_id} "
             f"(median generate {profile.latency_ms:.0f} ms): between-process sd {profile.sigma_b_pct:.2f}% "
             f"(upper bound B {profile.bound_pct:.2f}%), per-round noise {profile.round_sd_pct:.1f}%"]
    for effect, n in profile.rounds_for.items():
        if n is None:
            lines.append(f"on this machine a {effect}% win is not detected at {100 * POWER:.0f}% within the design's "
                         f"{design.max_rounds} rounds")
        else:
            seconds = 2 * n * profile.latency_ms / 1e3
            lines.append(f"on this machine a {effect}% win needs about {n} paired rounds ({seconds:.0f} s of timing) "
                         f"for {100 * POWER:.0f}% detection")
    for arm, est in profile.injected.items():
        lines.append(f"injected {arm}% speedup measured as {est:+.2f}%")
    lines += statement(measured_noise(profile, confidence), design, 2 * profile.latency_ms / 1e3, one_core)
    return lines


def figure(profile: NoiseProfile, null: tuple[StudyPair, ...], design: Design, path: Path) -> Path:
    """Left: the A/A pairs' trimmed means with +-B; right: rounds needed against the true win."""
    from matplotlib.figure import Figure

    rounds = profile.rounds
    r = StudyArm(NULL, null).log_ratios(rounds)
    loc = trimmed(r[None])[0][0]
    fig = Figure(figsize=(9, 3.6))
    left, right = fig.subplots(1, 2)
    left.plot(range(1, len(loc) + 1), [improvement_pct(x, "latency_ms") for x in loc], "o")
    for sign in (1, -1):
        left.axhline(sign * profile.bound_pct, color="C1", ls="--", lw=0.8)
    left.set(xlabel="A/A pair", ylabel="apparent gain (%)", title=f"A/A pairs (B = {profile.bound_pct:.2f}%)")
    bound = OffsetBound.of_pct(profile.bound_pct)
    effects = np.linspace(1.0, 20.0, 40)
    needs = [rounds_needed(bound, profile.spread.within_var, rounds, design, e) for e in effects]
    right.plot([e for e, n in zip(effects, needs) if n], [n for n in needs if n], "-")
    right.set(xlabel="true win (%)", ylabel=f"paired rounds for {100 * POWER:.0f}% detection",
              title="what this machine can see")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def budget_s(protocol: PerfProtocol, latency_ms: float | None, is_cuda: bool, pairs: int, rounds: int) -> float:
    """`dit-ar calibrate`'s default budget: 900 s, or more when the pairs at the best's latency need more (start-up,
    warm-up and timed rounds of every pair, with 30% to spare)."""
    if not latency_ms:
        return 900.0
    per_round = 2 * latency_ms / 1e3
    need = pairs * (2.0 + (protocol.warmup_rounds + rounds) * per_round) + one_pair_s(protocol, None, is_cuda)
    return max(900.0, 100 * math.ceil(1.3 * need / 100))


def one_pair_s(protocol: PerfProtocol, latency_ms: float | None, is_cuda: bool) -> float:
    """A conservative lower estimate of one pair's cost: worker start plus its warm-up and timed rounds."""
    start = 15.0 if is_cuda else 8.0  # measured cold starts: H200 14.5-20.8 s, 2-core CPU 9.5-13.4 s
    per_round = 2 * (latency_ms or 0.0) / 1e3
    return start + (protocol.warmup_rounds + 4) * per_round
