"""Measure the performance verdict itself on real worker pairs: false keeps on no-op commits and detection of
true speedups, for the sequential protocol and the earlier two-block protocol, side by side on the same
measurements. (`verdict_study` replays the verdict on noise models fitted to these files; this one times pairs.)

Collection is the product's (pytest_dit_ar/loop/speed/aa_pairs.py, what `dit-ar calibrate` runs): segments measured
by the experiment's own launcher and pair code, a no-op arm (`null`, the tree against itself) and one arm per
injected true speedup (the best side sleeps a set fraction of the measured latency), round-robin, every pair
closed after its segment. `--load N` runs N busy processes beside the workers for the whole collection (a
competing CPU load); `--overhead-segments` adds the sandboxed tree against itself unsandboxed.

Evaluation. Each arm's segments are consumed in order by repeated experiments: the sequential test
(perf_suite.sequential) takes segments until it decides, using the first `rounds` rounds of each; the
earlier protocol judges one segment as a block of its own shipped length (`--old-rounds`, paired Wilcoxon
+ bootstrap, lab/studies/block_test.py) and, if it passes, the next segment as the confirming block. So both
protocols are judged on the same processes in the same time window; segments are measured with the
longer of the two lengths. Experiments never share segments, so they are independent.

What it measured is a `perf_suite.studies.StudyResults` (the files of lab/data read the same), written with
this module's summary of both protocols. From the repository root:

    python -m lab.studies.measured_study --lane embedded-cpu --null-segments 40 --speedups 20 \\
        --segments-per-speedup 40 --load 1 --out study.json --figure study.png
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dit_ar_contract.config import PerfProtocol
from dit_ar_contract.errors import EXIT_REFUSED, Refused
from perf_suite.sequential import DECISIONS, Design, OffsetBound, SequentialTest, pooled_bound
from perf_suite.studies import NULL, OVERHEAD, StudyArm, StudyPair, StudyResults
from pytest_dit_ar.loop.speed.aa_pairs import PooledEstimate, StudyPlan, aa_spread, pooled, run_study

from .block_test import decide_block

OLD_BLOCKS = 2  # the earlier protocol: a block, then a confirming block in fresh workers
KEEP = DECISIONS[0]  # the sequential test's "keep"


# -- evaluation (pure) ---------------------------------------------------------------------------
@dataclass(frozen=True)
class StudyExperiment:
    """One experiment judged on consecutive segments of an arm."""

    keep: bool
    segments: int
    rounds: int
    estimate_pct: float
    decision: str


@dataclass(frozen=True)
class Resampled:
    """The sequential protocol's keep rate over random orderings of an arm's segments (`resampled`)."""

    orders: int
    keep_rate: float
    mean_segments: float


@dataclass(frozen=True)
class ProtocolRuns:
    """One protocol's experiments over one arm."""

    experiments: tuple[StudyExperiment, ...]
    resampled: Resampled | None = None  # the sequential protocol only

    @property
    def keeps(self) -> int:
        return sum(r.keep for r in self.experiments)

    @property
    def keep_rate(self) -> float | None:
        return self.keeps / len(self.experiments) if self.experiments else None

    @property
    def mean_rounds(self) -> float | None:
        return float(np.mean([r.rounds for r in self.experiments])) if self.experiments else None

    def as_dict(self) -> dict[str, Any]:
        d = {"experiments": len(self.experiments), "keeps": self.keeps, "keep_rate": self.keep_rate,
             "mean_rounds": self.mean_rounds, "decisions": [r.decision for r in self.experiments]}
        return d | ({"resampled": dataclasses.asdict(self.resampled)} if self.resampled is not None else {})


@dataclass(frozen=True)
class ArmSummary:
    """Both protocols' experiments on one arm, and the arm's spread."""

    segments: int
    new: ProtocolRuns
    old: ProtocolRuns
    median_log_ratio_sd: float | None
    trimmed_mean_sd_pct: float | None
    pooled: PooledEstimate | None
    offset_bound_pct: float | None = None  # the null arm: the bound B its spread gives

    def as_dict(self) -> dict[str, Any]:
        d = {"segments": self.segments, "new": self.new.as_dict(), "old": self.old.as_dict(),
             "segment_median_log_ratio_sd": self.median_log_ratio_sd,
             "segment_trimmed_mean_sd_pct": self.trimmed_mean_sd_pct,
             "pooled": self.pooled.as_dict() if self.pooled else None}
        return d | ({"offset_bound_pct": self.offset_bound_pct} if self.offset_bound_pct is not None else {})


def new_protocol(pairs: Sequence[StudyPair], design: Design, rounds: int,
                 bound: OffsetBound | None = None) -> list[StudyExperiment]:
    """Consecutive experiments of the sequential protocol over one arm's segments (first `rounds` of each)."""
    bound = bound or OffsetBound.default("cuda")
    out, test = [], SequentialTest(design, bound)
    for seg in pairs:
        look = test.add(list(seg.cand_s[:rounds]), list(seg.best_s[:rounds]))
        if look.final:
            out.append(StudyExperiment(look.decision == KEEP, look.segments, look.rounds, look.estimate_pct,
                                       look.decision))
            test = SequentialTest(design, bound)
    return out


def old_protocol(pairs: Sequence[StudyPair], protocol: PerfProtocol, metric: str,
                 rounds: int) -> list[StudyExperiment]:
    """Consecutive experiments of the earlier protocol: a block, and a confirming block if it passes."""
    out, passed = [], []
    for seg in pairs:
        stats = decide_block(list(seg.cand_s[:rounds]), list(seg.best_s[:rounds]), metric=metric,
                             min_improvement_pct=protocol.min_improvement_pct, alpha=protocol.alpha, resamples=2000)
        passed.append(stats)
        if not stats.passes or len(passed) == OLD_BLOCKS:
            keep = all(s.passes for s in passed)
            out.append(StudyExperiment(keep, len(passed), sum(s.rounds for s in passed), passed[0].improvement_pct,
                                       KEEP if keep else "discard"))
            passed = []
    return out


def resampled(pairs: Sequence[StudyPair], design: Design, rounds: int, orders: int = 2000,
              seed: int = 0) -> Resampled | None:
    """One sequential experiment from the start of each of `orders` random orderings of the segments: a
    resampling estimate of the keep rate (experiments share segments, so they are not independent)."""
    if len(pairs) < design.max_segments:
        return None
    rng = np.random.default_rng(seed)
    kept, used = 0, []
    for _ in range(orders):
        test = SequentialTest(design, OffsetBound.default("cuda"))
        for i in rng.permutation(len(pairs)):
            look = test.add(list(pairs[i].cand_s[:rounds]), list(pairs[i].best_s[:rounds]))
            if look.final:
                kept += look.decision == KEEP
                used.append(look.segments)
                break
    return Resampled(orders, kept / orders, float(np.mean(used)))


def summarize(arms: dict[str, StudyArm], protocol: PerfProtocol, metric: str, old_rounds: int,
              orders: int = 2000) -> dict[str, ArmSummary]:
    design = dataclasses.replace(Design.from_protocol(protocol, metric), pairs=1)  # the study times segments
    out = {}
    for name, arm in arms.items():
        pairs = arm.pairs
        medians = [float(np.median(p.log_ratios())) for p in pairs]
        spread = aa_spread(pairs, protocol.rounds)
        bound = None
        if name == NULL and spread is not None:
            bound = pooled_bound(OffsetBound.default("cuda"), [spread], protocol.bound_confidence, 1).pct
        out[name] = ArmSummary(
            len(pairs),
            ProtocolRuns(tuple(new_protocol(pairs, design, protocol.rounds)),
                         resampled(pairs, design, protocol.rounds, orders)),
            ProtocolRuns(tuple(old_protocol(pairs, protocol, metric, old_rounds))),
            float(np.std(medians, ddof=1)) if len(medians) > 1 else None,
            100 * float(np.sqrt(spread.spread_var)) if spread else None,
            pooled(pairs, design, protocol.rounds), bound)
    return out


def figure(summary: dict[str, ArmSummary], path: Path) -> Path:
    """Detection rate and rounds used against the true speedup, both protocols; the no-op arm is the point at 0
    (a study of no-ops alone still shows its keeps and rounds)."""
    from matplotlib.figure import Figure

    arms = sorted((0.0 if a == NULL else float(a), v) for a, v in summary.items() if a != OVERHEAD)
    fig = Figure(figsize=(9, 3.6))
    left, right = fig.subplots(1, 2)
    for name, style in (("new", "o-"), ("old", "s--")):
        runs = [(x, getattr(v, name)) for x, v in arms if getattr(v, name).experiments]
        left.plot([x for x, _ in runs], [100 * r.keep_rate for _, r in runs], style, label=f"{name} protocol")
        right.plot([x for x, _ in runs], [r.mean_rounds for _, r in runs], style, label=f"{name} protocol")
    null = summary.get(NULL)
    if null:
        for name, colour in (("new", "C0"), ("old", "C1")):
            runs = getattr(null, name)
            if runs.experiments:
                left.axhline(100 * runs.keep_rate, color=colour, lw=0.8, ls=":",
                             label=f"{name}: no-ops kept {runs.keeps}/{len(runs.experiments)}")
    top = max([x for x, _ in arms] + [1.0])
    for ax in (left, right):
        ax.set_xlim(-0.05 * top, 1.05 * top)
    left.set(xlabel="true speedup (%)", ylabel="kept (%)", title="detection", ylim=(-5, 105))
    right.set(xlabel="true speedup (%)", ylabel="paired rounds per decision", title="cost")
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def plan_from_args(args: argparse.Namespace) -> StudyPlan:
    """The plan this study's command line asks for."""
    try:
        speedups = tuple(float(s) for s in args.speedups.split(",") if s.strip())
        cores = tuple(int(c) for c in args.cpu_affinity.split(",")) if args.cpu_affinity else None
    except ValueError as exc:
        raise Refused(f"--speedups / --cpu-affinity: {exc}") from None
    return StudyPlan(args.config, args.lane, args.null_segments, speedups, args.segments_per_speedup, args.steps,
               args.rounds, args.old_rounds, args.pool, args.load, cores, args.deadline_s, not args.unsandboxed,
               args.overhead_segments, None, args.out)


def summary_of(results: StudyResults, orders: int = 2000) -> dict[str, ArmSummary]:
    """Both protocols on every arm of a study (a file of lab/data, or one just collected)."""
    return summarize(results.arms, results.recorded_protocol(), results.metric, results.old_rounds, orders)


def summary_dict(results: StudyResults) -> dict[str, Any]:
    """The summary written beside the results (derived data, recomputed from the pairs, never read back)."""
    return {a: s.as_dict() for a, s in summary_of(results).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.studies.measured_study", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("config/autoresearch.json"))
    parser.add_argument("--lane", required=True)
    parser.add_argument("--null-segments", type=int, default=40)
    parser.add_argument("--speedups", default="3,5,10", help="true speedups to inject, in percent")
    parser.add_argument("--segments-per-speedup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=None, help="override the lane's sampling steps")
    parser.add_argument("--rounds", type=int, default=None, help="override the rounds per segment")
    parser.add_argument("--old-rounds", type=int, default=12,
                        help="rounds per block of the earlier protocol (it shipped 12 on CPU, 16 on the GPU lanes)")
    parser.add_argument("--pool", type=int, default=2, help="worker pairs started at once (outside timed rounds)")
    parser.add_argument("--load", type=int, default=0, help="busy processes running beside the workers")
    parser.add_argument("--cpu-affinity", default=None, help="comma-separated cores for both sides' workers")
    parser.add_argument("--deadline-s", type=float, default=None, help="stop collecting after this many seconds")
    parser.add_argument("--unsandboxed", action="store_true", help="workers without the bubblewrap sandbox")
    parser.add_argument("--overhead-segments", type=int, default=0,
                        help="segments of the sandboxed tree against itself unsandboxed (the sandbox's overhead)")
    parser.add_argument("--out", type=Path, default=Path("study.json"))
    parser.add_argument("--figure", type=Path, default=None, help="write the detection/rounds figure here")
    args = parser.parse_args(argv)
    try:
        results = run_study(plan_from_args(args), summary_dict)
    except Refused as exc:
        print(f"{parser.prog}: refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    summary = summary_of(results)
    if args.figure:
        figure(summary, args.figure)
    print(json.dumps({a: s.as_dict() for a, s in summary.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
