"""How often the p95 guardrail refuses, by simulation: the pooled point estimate (the guardrail before it was
paired) against the paired bootstrap bound (perf_suite.guardrails.tail_latency), for a no-op under host load
spikes and for candidates that stall in a share of their rounds.

Model (times in ms, one round = candidate and best back to back): a base time, a round factor both sides share
(slow host load, lognormal), each side's own noise (lognormal), and per side and round a load spike with
probability `spike_p` that multiplies that side's time by U(1.5, 2.5) (the CPU lane's "p95 449 ms against 215
ms": spikes that hit one side of a round and not the other). A stalling candidate adds `stall_ms` in a share
`stall_p` of its rounds. Rounds come in segments of `rounds` (the protocol's 12).

    python -m lab.studies.tail_guard_study --trials 400
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from perf_suite import guardrails as guard


@dataclass(frozen=True)
class Scenario:
    name: str
    spike_p: float = 0.0
    stall_p: float = 0.0
    stall_ms: float = 0.0
    speedup: float = 1.0  # candidate base time / best's


def one_run(rng: np.random.Generator, s: Scenario, segments: int, rounds: int, base_ms: float = 200.0
            ) -> tuple[list[list[float]], list[list[float]]]:
    n = (segments, rounds)
    shared = np.exp(rng.normal(0, 0.03, n))
    own = np.exp(rng.normal(0, 0.02, (2, *n)))
    spikes = np.where(rng.random((2, *n)) < s.spike_p, rng.uniform(1.5, 2.5, (2, *n)), 1.0)
    cand = base_ms * s.speedup * shared * own[0] * spikes[0] + np.where(rng.random(n) < s.stall_p, s.stall_ms, 0.0)
    best = base_ms * shared * own[1] * spikes[1]
    return (cand / 1e3).tolist(), (best / 1e3).tolist()


def pooled_refuses(cand: list[list[float]], best: list[list[float]], tolerance_pct: float) -> bool:
    """The guardrail before it was paired: pooled p95 against the best's pooled p95 plus the tolerance."""
    c = [t for seg in cand for t in seg]
    b = [t for seg in best for t in seg]
    return guard.p95(c) > guard.p95(b) * (1 + tolerance_pct / 100)


def study(trials: int, segments: int, rounds: int, tolerance_pct: float, seed: int) -> list[tuple[str, float, float]]:
    rng = np.random.default_rng(seed)
    scenarios = [Scenario("no-op, quiet host"), Scenario("no-op, 5% one-sided load spikes", spike_p=0.05),
                 Scenario("no-op, 10% one-sided load spikes", spike_p=0.10),
                 Scenario("20% faster, 5% load spikes", spike_p=0.05, speedup=0.8),
                 Scenario("stalls +400 ms in 10% of rounds", stall_p=0.10, stall_ms=400.0),
                 Scenario("stalls +400 ms in 15% of rounds, 5% load spikes", spike_p=0.05, stall_p=0.15,
                          stall_ms=400.0),
                 Scenario("stalls +400 ms in 20% of rounds, 5% load spikes", spike_p=0.05, stall_p=0.20,
                          stall_ms=400.0)]
    out = []
    for s in scenarios:
        old = new = 0
        for _ in range(trials):
            cand, best = one_run(rng, s, segments, rounds)
            old += pooled_refuses(cand, best, tolerance_pct)
            new += guard.tail_latency(cand, best, tolerance_pct).problem is not None
        out.append((s.name, old / trials, new / trials))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.studies.tail_guard_study")
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--segments", type=int, nargs="+", default=[3, 8])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--tolerance-pct", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    for segments in args.segments:
        print(f"{segments} segments x {args.rounds} rounds, tolerance {args.tolerance_pct:g}%, {args.trials} trials")
        print(f"  {'scenario':<52} {'pooled p95':>10} {'paired bound':>13}")
        for name, old, new in study(args.trials, segments, args.rounds, args.tolerance_pct, args.seed):
            print(f"  {name:<52} {old:>10.1%} {new:>13.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
