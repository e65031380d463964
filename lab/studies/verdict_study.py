"""The verdict's operating characteristics by simulation, side by side with the protocol shipped before issue 20
(the tables of docs/design/speed-verdict.md), with two oracles that knew the true variance (lab/studies/simulation.py).

Noise regimes come from lab/studies/simulation.py (fitted to lab/data/h200 and lab/data/cpu, plus a CUDA-graph-quiet
and a mixed regime); the new designs are judged by perf_suite.sequential.run_experiments, the code that judges
real experiments; "before" is a replica of the shipped pre-issue-20 rule (fixed floor on the between part taken
from the total spread, df = summed within df, z >= 0 futility).

From the repository root:

    python -m lab.studies.verdict_study            # all tables (a few minutes on the 2-core VM)
    python -m lab.studies.verdict_study --quick    # N / 4
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.special import ndtr, stdtrit

from dit_ar_contract.config import load_config
from perf_suite.sequential import KEEP, Design, OffsetBound, boundaries, pair_parts, run_experiments

from .simulation import (
    LAB_DATA,
    Regime,
    fixed_sample_power,
    pair_variance,
    regimes,
    run_oracle,
    simulate_session,
)

ROOT = Path(__file__).resolve().parents[2]

EFFECTS = (0.0, 2.5, 3.0, 5.0, 10.0)


@dataclass(frozen=True)
class Cost:
    """Verdict wall time: timed rounds, plus per extra fresh pair its build and warm-up (segments layout)."""

    latency_s: float
    pair_s: float  # start-up + warm-up of one more fresh pair (not overlapped)
    rewarm_s: float = 0.0  # concurrent layout: one re-warm round per worker
    first_s: float = 0.0  # the first pair's warm-up and round checks (its start overlaps the quality run)

    def wall(self, design: Design, rounds: np.ndarray) -> np.ndarray:
        timed = rounds * 2 * self.latency_s + self.first_s
        if design.concurrent:
            return timed + design.pairs * 2 * self.rewarm_s
        pairs = np.ceil(rounds / design.rounds)
        return timed + (pairs - 1) * self.pair_s


def before(r: np.ndarray, floor_pct: float, alpha: float = 0.01, min_improvement: float = 2.0) -> tuple:
    """The shipped rule before issue 20, vectorised: segments of 8 rounds, 2..6 of them."""
    N, K, n = r.shape
    parts = pair_parts(r)
    c = boundaries(alpha, tuple(k / K for k in range(2, K + 1)), 1.0)
    f2 = math.log1p(floor_pct / 100) ** 2
    decision, used = np.full(N, -1), np.zeros(N, int)
    for k in range(1, K + 1):
        loc, var = parts.loc[:, :k], parts.var[:, :k]
        est, W = loc.mean(1), var.mean(1)
        b = np.full(N, f2) if k < 2 else np.maximum(f2, loc.var(1, ddof=1) - W)
        se = np.sqrt((b + W) / k)
        z = est / se
        df = k * parts.df
        gain = -np.expm1(est) * 100
        keep = (z <= -stdtrit(df, ndtr(c[k - 2]))) & (gain >= min_improvement) if k >= 2 else np.zeros(N, bool)
        optimistic = -np.expm1(est - stdtrit(df, ndtr(2.0)) * se) * 100
        stop = keep | (optimistic < min_improvement) | ((z >= 0) & (k >= 2)) | (k == K)
        new = stop & (decision < 0)
        decision[new] = np.where(keep[new], KEEP, 1)
        used[new] = k * n
    return decision, used


def row(label: str, cells: list[str]) -> str:
    return "| " + label + " | " + " | ".join(cells) + " |"


def table(regime: Regime, designs: dict[str, tuple[Design, float, Cost]], floor: float, cost_before: Cost, N: int,
          rng: np.random.Generator) -> list[str]:
    out = [row("design (B)", [f"{e:g}%" if e else "no-op" for e in EFFECTS]
               + ["10% KEEP wall (median)", "no-op verdict wall (median)"]),
           row("---", ["---"] * (len(EFFECTS) + 2))]
    cells, keep10, noop = [], "", ""
    for e in EFFECTS:
        n = N * 4 if e == 0 else N
        d, used = before(regime.draw(rng, (n, 6, 8), e), floor)
        kept = d == KEEP
        cells.append(f"{100 * kept.mean():.{2 if e == 0 else 1}f}% ({used.mean():.0f} r)")
        if e == 10.0 and kept.any():
            keep10 = f"{np.median(cost_before.wall(Design(rounds=8), used[kept])):.0f} s"
        if e == 0:
            noop = f"{np.median(cost_before.wall(Design(rounds=8), used)):.0f} s"
    out.append(row(f"before: floor {floor:g}%, 8 rounds x 2..6", cells + [keep10, noop]))
    shipped_rounds: dict[float, float] = {}
    for label, (design, bound_pct, cost) in designs.items():
        last = design.schedule()[-1]
        cells, keep10, noop = [], "", ""
        for e in EFFECTS:
            n = N * 4 if e == 0 else N
            res = run_experiments(regime.draw(rng, (n, last.pairs, last.rounds), e), design,
                                  math.log1p(bound_pct / 100))
            kept = res.decision == KEEP
            cells.append(f"{100 * kept.mean():.{2 if e == 0 else 1}f}% ({res.rounds.mean():.0f} r)")
            shipped_rounds.setdefault(e, res.rounds.mean())
            if e == 10.0 and kept.any():
                keep10 = f"{np.median(cost.wall(design, res.rounds[kept])):.0f} s"
            if e == 0:
                noop = f"{np.median(cost.wall(design, res.rounds)):.0f} s"
        out.append(row(f"{label} (B {bound_pct:g}%)", cells + [keep10, noop]))
    # the oracles draw from their own stream, so the rows above stay those of the runs before they were added
    oracle_rng = np.random.default_rng([int(rng.bit_generator.seed_seq.entropy), len(regime.name)])
    return out + oracle_rows(regime, next(iter(designs.values()))[0], shipped_rounds, N, oracle_rng)


def oracle_rows(regime: Regime, design: Design, shipped_rounds: dict[float, float], N: int,
                rng: np.random.Generator) -> list[str]:
    """Two tests that knew the true variance of a pair's trimmed mean: the shipped rule (the first design) with
    it (same looks, boundaries, minimum gain and early stops), and one z-test at that rule's mean rounds."""
    V = pair_variance(regime, design.rounds, rng)
    last = design.schedule()[-1]
    same, fixed = [], []
    for e in EFFECTS:
        res = run_oracle(regime.draw(rng, (N * 4 if e == 0 else N, last.pairs, last.rounds), e), design, V)
        same.append(f"{100 * np.mean(res.decision == KEEP):.{2 if e == 0 else 1}f}% ({res.rounds.mean():.0f} r)")
        power = fixed_sample_power(e, V, shipped_rounds[e] / design.rounds, design.alpha)
        fixed.append(f"{100 * power:.{2 if e == 0 else 1}f}% ({shipped_rounds[e]:.0f} r)")
    sd = 100 * math.sqrt(V)
    return [row(f"oracle: the shipped rule knowing V (pair sd {sd:.2f}%)", same + ["", ""]),
            row("oracle: one z-test knowing V at the shipped rule's mean rounds", fixed + ["", ""])]


def sessions(regime: Regime, design: Design, prior: OffsetBound, N: int, rng: np.random.Generator) -> str:
    """40 no-op experiments in a row against one best, B learned as the session goes."""
    out = simulate_session(regime, design, prior, [0.0] * 40, N, rng)
    per = out.decision == KEEP
    return (f"40 no-ops in a row, {N} sessions: kept {100 * per.mean():.2f}% of experiments, sessions with 0 keeps "
            f"{100 * np.mean(~per.any(1)):.0f}%; B median after 1 / 5 / 40 experiments: "
            f"{np.median(out.bound_pct[:, 1]):.2f}% / {np.median(out.bound_pct[:, 5]):.2f}% / "
            f"{np.median(out.bound_pct[:, -1]):.2f}%")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--only", default=None,
                        help="one regime (eager-h200, graph, graph-h200, mixed, cpu, hand-graph-h200)")
    args = parser.parse_args(argv)
    N = 250 if args.quick else 1000
    rng = np.random.default_rng(args.seed)
    t0 = time.process_time()
    cfg = load_config(ROOT / "config" / "autoresearch.json")
    cpu = Design.from_protocol(cfg.lanes["embedded-cpu"].performance, "latency_ms")
    gpu = Design.from_protocol(cfg.lanes["dit-xl2-256"].performance, "latency_ms")
    conc = Design(pairs=8, rounds=36, first_look_rounds=4, look_every_rounds=2)
    regs = regimes(LAB_DATA)
    gpu_cost, cpu_cost = Cost(0.45, 9.8, 0.45), Cost(0.15, 12.0, 0.15)
    # the harness's graphed best on the H200: 80 ms rounds; a fresh pair's start, warm-up (its compiled first
    # generates), round checks and close 12 s, the first pair's too (wave 10's 10% KEEP: 36 s besides its rounds
    # in 3 pairs)
    g_cost = Cost(0.08, 12.0, 0.08, first_s=12.0)
    # the eager lane as the H200 measured it (lab/notebook/h200-research-sessions.md, waves 8-9):
    # 545 ms a generate, about 9 s of warm-up, round checks, start and close a further pair
    # and 6.5 s of the first pair's warm-up and checks
    e_cost = Cost(0.545, 9.0, 0.545, first_s=6.5)
    # a hand-captured CUDA graph best (wave 10's study): 313 ms a generate, 18.6 s a pair of which 10 s timed
    h_cost = Cost(0.313, 8.6, 0.313, first_s=8.6)
    plans = {
        "eager-h200": (7.0, e_cost, {f"segments {gpu.rounds} x 2..{gpu.max_segments}": (gpu, 2.5, e_cost),
                                     "segments, B learned": (gpu, 1.8, e_cost),
                                     "concurrent 8 x <=36": (conc, 2.5, e_cost),
                                     "concurrent, B learned": (conc, 1.8, e_cost)}),
        "graph": (7.0, Cost(0.30, 9.8), {f"segments {gpu.rounds} x 2..{gpu.max_segments}": (gpu, 2.5, gpu_cost),
                                         "segments, B learned": (gpu, 0.14, replace(gpu_cost, latency_s=0.30)),
                                         "concurrent 8 x <=36": (conc, 2.5, replace(gpu_cost, latency_s=0.30)),
                                         "concurrent, B learned": (conc, 0.14, replace(gpu_cost, latency_s=0.30))}),
        "graph-h200": (7.0, Cost(0.08, 9.8), {f"segments {gpu.rounds} x 2..{gpu.max_segments}": (gpu, 2.5, g_cost),
                                              "segments, B of its calibration": (gpu, 1.67, g_cost),
                                              "concurrent 8 x <=36": (conc, 2.5, g_cost),
                                              "concurrent, B of its calibration": (conc, 1.67, g_cost)}),
        "mixed": (7.0, Cost(0.38, 9.8), {f"segments {gpu.rounds} x 2..{gpu.max_segments}, B of the graphed best":
                                         (gpu, 0.14, gpu_cost),
                                         "concurrent 8 x <=36, B of the graphed best": (conc, 0.14, gpu_cost)}),
        "cpu": (3.4, Cost(0.15, 12.0), {f"segments {cpu.rounds} x 2..{cpu.max_segments}": (cpu, 2.5, cpu_cost),
                                        "segments, B learned": (cpu, 1.9, cpu_cost),
                                        "concurrent 8 x <=36": (conc, 2.5, cpu_cost)}),
        "hand-graph-h200": (7.0, Cost(0.313, 9.8), {
            f"segments {gpu.rounds} x 2..{gpu.max_segments}": (gpu, 2.5, h_cost),
            "segments, B of its calibration": (gpu, 0.44, h_cost)}),
    }
    print(f"N = {N} experiments per cell ({4 * N} for no-ops); cells: kept (mean paired rounds)\n")
    for name, (floor, cost_before, designs) in plans.items():
        if name not in regs or (args.only and name != args.only):  # its study is not in lab/data, or not asked
            continue
        print(f"### {regs[name].name}\n")
        print("\n".join(table(regs[name], designs, floor, cost_before, N, rng)))
        design = cpu if name == "cpu" else gpu
        print("\n" + sessions(regs[name], design, OffsetBound.of_pct(2.5), max(N // 10, 25), rng) + "\n")
    print(f"[{time.process_time() - t0:.0f} s CPU]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
