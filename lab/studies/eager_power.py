"""Eager power: what a DiT eager GPU lane keeps of a true 10% and 5% win, and of a no-op, within the design's
round budget, for each setting of the levers (both sides on one core or on two, generates per side per round,
rounds per pair, A/A pairs in the calibration that sets B).

Noise model (a slow host state shared by the processes of one core; lab/notebook/eager-power.md fits it):
the log time of a generate is   level + h(t) + e,   e ~ N(0, sd_e^2) independent per generate, and h an AR(1)
chain over the generates that run on one core, h(t+1) = phi h(t) + sqrt(1 - phi^2) sd_h z. Both workers pinned
to one core alternate on ONE chain (a round's two sides are consecutive generates, so most of h cancels in the
ratio); on two cores each side has a chain of its own (nothing cancels, and the ratio wanders with phi). A
per-pair process offset N(0, sd_b^2) is added to every round of a pair (the H100's calibration: 0.00%).

Each simulated session is what a user does: `dit-ar calibrate --pairs P` (A/A pairs timed under the same
layout, B = its 90% chi-square bound, `pooled_bound` with min_df 1 as `profile_of` does), then one experiment
judged by the shipped code (`perf_suite.sequential.run_experiments`) with that B.

    python -m lab.studies.eager_power [--sessions 2000] [--out lab/notebook/eager-power-table.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dit_ar_contract.config import PerfProtocol
from perf_suite.power import power
from perf_suite.sequential import KEEP, Design, OffsetBound, PairSpread, pooled_bound, run_experiments

EFFECTS = (10.0, 5.0, 0.0)


@dataclass(frozen=True)
class HostNoise:
    """The slow shared host state (AR(1) over generates on one core) plus per-generate jitter and an offset."""

    sd_h: float  # stationary sd of h (log scale)
    phi: float  # lag-1 correlation of h between consecutive generates on one core
    sd_e: float = 0.03  # independent jitter per generate
    sd_b: float = 0.0  # per-pair process offset

    def round_sd(self) -> float:
        """The sd of one round's log ratio with both sides consecutive on one core, one generate a side."""
        return math.sqrt(2 * (1 - self.phi) * self.sd_h ** 2 + 2 * self.sd_e ** 2)

    @classmethod
    def fitted(cls, round_sd: float, phi: float, sd_e: float = 0.03, sd_b: float = 0.0) -> HostNoise:
        """The model whose one-core round sd is `round_sd` (the calibration's per-round noise) at this phi."""
        var_h = (round_sd ** 2 - 2 * sd_e ** 2) / (2 * (1 - phi))
        if var_h <= 0:
            raise ValueError(f"round sd {round_sd} is below the jitter alone ({math.sqrt(2) * sd_e:.3f})")
        return cls(math.sqrt(var_h), phi, sd_e, sd_b)


@dataclass(frozen=True)
class Levers:
    """One row: how a pair is timed and how much, and how B was calibrated."""

    one_core: bool = True  # both sides on one core (pair_cores "one") or each on its own
    generates: int = 1  # generates per side per round (the alternation's length)
    rounds: int = 16  # paired rounds per pair
    max_segments: int = 12  # pairs at most (the design's budget: rounds x max_segments)
    cal_pairs: int = 4  # A/A pairs of the calibration that sets B
    cal_rounds: int | None = None  # rounds per calibration pair (`calibrate --rounds`; None: `rounds`)

    def label(self) -> str:
        cal = f"calibrate --pairs {self.cal_pairs}" + (f" --rounds {self.cal_rounds}" if self.cal_rounds else "")
        return (f"{'one core' if self.one_core else 'two cores'}, {self.generates} gen/round, "
                f"{self.rounds} rounds x {self.max_segments} pairs, {cal}")


def chain(shape: tuple[int, ...], length: int, noise: HostNoise, rng: np.random.Generator) -> np.ndarray:
    """h over `length` consecutive generates, stationary from the first, for every chain of `shape`."""
    h = np.empty((*shape, length))
    h[..., 0] = rng.normal(0.0, noise.sd_h, shape)
    step = math.sqrt(1 - noise.phi ** 2) * noise.sd_h
    for t in range(1, length):
        h[..., t] = noise.phi * h[..., t - 1] + rng.normal(0.0, step, shape)
    return h


def log_ratios(n: int, pairs: int, levers: Levers, noise: HostNoise, effect_pct: float,
               rng: np.random.Generator, rounds: int | None = None) -> np.ndarray:
    """(n, pairs, rounds) log(candidate/best) of paired rounds timed as `levers` say: balanced orders (CB, BC,
    ... from a random first order); a side's round time is the sum of its `generates` consecutive generates.
    The host state moves in wall time: on two cores each side's chain also moves while the other side runs."""
    g, R = levers.generates, rounds or levers.rounds
    shape = (n, pairs)
    h = chain(shape, 2 * g * R, noise, rng).reshape(n, pairs, R, 2, g)
    first = h[..., 0, :]
    if levers.one_core:
        second = h[..., 1, :]
    else:
        second = chain(shape, 2 * g * R, noise, rng).reshape(n, pairs, R, 2, g)[..., 1, :]
    jitter = rng.normal(0.0, noise.sd_e, (n, pairs, R, 2, g))
    t_first = np.log(np.exp(first + jitter[..., 0, :]).sum(-1))
    t_second = np.log(np.exp(second + jitter[..., 1, :]).sum(-1))
    cand_first = rng.random(shape)[..., None] < 0.5
    flip = (np.arange(R) % 2 == 1)
    cand_is_first = cand_first ^ flip  # CB, BC, CB, ... or BC, CB, ...
    cand = np.where(cand_is_first, t_first, t_second)
    best = np.where(cand_is_first, t_second, t_first)
    offset = rng.normal(0.0, noise.sd_b, shape)[..., None] if noise.sd_b > 0 else 0.0
    return cand - best + offset + math.log1p(-effect_pct / 100.0)


def calibrated_bounds(n: int, levers: Levers, noise: HostNoise, protocol: PerfProtocol,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """B (log scale) per session, as `dit-ar calibrate --pairs P` stores it: the 90% chi-square bound of the
    A/A pairs' spread less their within variance (pooled_bound, min_df 1); and each calibration's per-round
    variance as `dit-ar calibrate` reads it (the pairs' mean W times their rounds)."""
    r = log_ratios(n, levers.cal_pairs, levers, noise, 0.0, rng, levers.cal_rounds)
    prior = OffsetBound.of_pct(100.0, "none")
    spreads = [PairSpread.of(r[i]) for i in range(n)]
    bounds = np.array([pooled_bound(prior, [s], protocol.bound_confidence, 1).sd for s in spreads])
    return bounds, np.array([s.within_var * r.shape[-1] for s in spreads])


def design_of(levers: Levers, protocol: PerfProtocol) -> Design:
    p = dataclasses.replace(protocol, rounds=levers.rounds, max_segments=levers.max_segments)
    return Design.from_protocol(p, "latency_ms")


@dataclass(frozen=True)
class Row:
    levers: Levers
    keep: dict[float, float]  # effect % -> share of sessions kept
    median_bound_pct: float
    predicted: dict[float, float]  # effect % -> what `dit-ar calibrate` predicts (perf_suite.power), median session
    rounds_used: dict[float, float]  # effect % -> mean paired rounds to the decision
    sessions: int


def simulate(levers: Levers, noise: HostNoise, sessions: int, seed: int = 0,
             protocol: PerfProtocol | None = None) -> Row:
    """P(keep) per effect over `sessions` sessions (calibration, then one experiment with its B)."""
    protocol = protocol or PerfProtocol(rounds=16, max_segments=12, warmup_rounds=3)
    rng = np.random.default_rng(seed)
    bound, round_var = calibrated_bounds(sessions, levers, noise, protocol, rng)
    design = design_of(levers, protocol)
    predicted = {e: float(np.median([power(e, b, v, design) for b, v in zip(bound, round_var)])) for e in EFFECTS[:2]}
    keep, used = {}, {}
    for effect in EFFECTS:
        r = log_ratios(sessions, levers.max_segments, levers, noise, effect, rng)
        v = run_experiments(r, design, bound)
        keep[effect] = float(np.mean(v.decision == KEEP))
        used[effect] = float(np.mean(v.rounds))
    return Row(levers, keep, 100 * float(np.median(np.expm1(bound))), predicted, used, sessions)


REGIMES = {  # name -> the fitted noise (lab/notebook/eager-power.md says where each figure comes from)
    "h100": HostNoise.fitted(0.18, 0.69),
    "h200": HostNoise.fitted(0.14, 0.69),
    "h100-offset": HostNoise.fitted(0.18, 0.69, sd_b=0.015),  # the H100 with a 1.5% process offset (sensitivity)
}
BUDGET = 192  # the DiT GPU lanes' design: 16 rounds x 12 pairs


def rows() -> list[Levers]:
    """The lever settings of the table: today's default first, then one lever at a time, then combined."""
    base = Levers()
    return [base,
            dataclasses.replace(base, one_core=False),
            dataclasses.replace(base, generates=2, rounds=8),
            dataclasses.replace(base, cal_pairs=8),
            dataclasses.replace(base, cal_pairs=16),
            dataclasses.replace(base, rounds=24, max_segments=8),
            dataclasses.replace(base, rounds=32, max_segments=6),
            dataclasses.replace(base, rounds=24, max_segments=8, cal_pairs=8),
            dataclasses.replace(base, rounds=32, max_segments=6, cal_pairs=8),
            dataclasses.replace(base, rounds=8, max_segments=24, cal_pairs=8),
            dataclasses.replace(base, cal_pairs=8, cal_rounds=48),
            dataclasses.replace(base, cal_pairs=12, cal_rounds=48),
            dataclasses.replace(base, cal_pairs=16, cal_rounds=48),
            dataclasses.replace(base, cal_pairs=16, cal_rounds=64),
            dataclasses.replace(base, rounds=24, max_segments=8, cal_pairs=16, cal_rounds=48),
            dataclasses.replace(base, rounds=24, max_segments=12, cal_pairs=16, cal_rounds=48),
            dataclasses.replace(base, max_segments=16, cal_pairs=16, cal_rounds=48)]


def table(regime: str, sessions: int, seed: int = 0) -> list[str]:
    noise = REGIMES[regime]
    out = [f"### {regime}: one-core round sd {100 * noise.round_sd():.1f}%, sd_h {100 * noise.sd_h:.1f}%, "
           f"phi {noise.phi:g}, jitter {100 * noise.sd_e:g}%, offset sd {100 * noise.sd_b:g}%; {sessions} sessions "
           "a row", "",
           "| levers | median B | P(keep), 10% win | P(keep), 5% win | P(keep), no-op | calibrate predicts, 10% / 5% "
           "| rounds used, 10% / no-op |",
           "|---|---|---|---|---|---|---|"]
    for i, levers in enumerate(rows()):
        row = simulate(levers, noise, sessions, seed + i)
        k = row.keep
        out.append(f"| {levers.label()} | {row.median_bound_pct:.2f}% | {100 * k[10.0]:.1f}% | {100 * k[5.0]:.1f}% | "
                   f"{100 * k[0.0]:.2f}% | {100 * row.predicted[10.0]:.0f}% / {100 * row.predicted[5.0]:.0f}% | "
                   f"{row.rounds_used[10.0]:.0f} / {row.rounds_used[0.0]:.0f} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--regime", choices=sorted(REGIMES), action="append")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    lines: list[str] = []
    for name in args.regime or sorted(REGIMES):
        lines += table(name, args.sessions, args.seed) + [""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
