"""Measure the performance verdict itself: false keeps on no-op commits and detection of true speedups,
for the sequential protocol and the earlier two-block protocol, side by side on the same measurements.

Collection. Segments are measured by the experiment's own code: its launcher (loop/launch.py `launcher_for`,
with the same sandbox policy: git, the state, the project's mutable paths and the corpora hidden) and its
pair code (loop/measurement.py: `PairSource`, pairs forked from each side's fork servers when the lane's
`performance.fork_server` is on, built outside timed rounds, waiting pairs frozen, both sides pinned to the
timed cores, warm-up until steady, then paired rounds in balanced order with fresh seeds). A no-op arm
(`null`) times the tree against itself; a speedup arm times it against a copy whose `generate()` first
sleeps a set fraction of the measured latency (loop/patching.py `sleep_patch`), so the tree is truly faster
by that fraction. Arms are measured round-robin (a segment of each in turn), so a change in the machine's
load reaches all of them; every pair is closed after its segment. `--load N` runs N busy processes beside
the workers for the whole collection (a competing CPU load).

Evaluation. Each arm's segments are consumed in order by repeated experiments: the sequential test
(perf_suite.sequential) takes segments until it decides, using the first `rounds` rounds of each; the
earlier protocol judges one segment as a block of its own shipped length (`--old-rounds`, paired Wilcoxon
+ bootstrap, perf_suite.stats) and, if it passes, the next segment as the confirming block. So both
protocols are judged on the same processes in the same time window; segments are measured with the
longer of the two lengths. Experiments never share segments, so they are independent.

What runs is a `StudyPlan` (built from this module's arguments or `dit-ar calibrate`'s); what it measured is
a `perf_suite.studies.StudyResults` (typed, with a format version; the files of docs/data still read).

    python -m pytest_dit_ar.loop.study --lane embedded-cpu --null-segments 40 --speedups 20 \\
        --segments-per-speedup 40 --load 1 --out study.json --figure study.png
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import t as student

from dit_ar_contract.config import PerfProtocol
from dit_ar_contract.errors import EXIT_REFUSED, Refused
from perf_suite.sequential import (
    DECISIONS,
    Design,
    OffsetBound,
    PairSpread,
    SequentialTest,
    improvement_pct,
    look_stats,
    pooled_bound,
)
from perf_suite.stats import decide_block
from perf_suite.studies import NULL, OVERHEAD, StudyArm, StudyPair, StudyResults
from quality_suite.corpora import load_corpus

from ..state.perf_record import SegmentRecord
from ..state.session import Session, open_session
from ..worker.client import WorkerLauncher
from ..worker.forkserver import ForkServers
from .clean_rounds import GpuWatch
from .launch import launcher_for
from .measurement_plan import MeasurementPlan, Side
from .pairs import SIDE_NAMES, PairSource, gpu_watch, timed_cores
from .patching import sleep_patch
from .pool import PoolPlan
from .segment import run_segment

OLD_BLOCKS = 2  # the earlier protocol: a block, then a confirming block in fresh workers
KEEP = DECISIONS[0]  # the sequential test's "keep"


@dataclass(frozen=True)
class StudyPlan:
    """What a study collects, and how: every knob of the engine in one typed value."""

    config: Path
    lane: str | None = None  # None: the session's (or the config's default) lane
    null_pairs: int = 40  # A/A pairs of the tree against itself
    speedups: tuple[float, ...] = (3.0, 5.0, 10.0)  # true speedups to inject, in percent
    pairs_per_speedup: int = 20
    steps: int | None = None  # overrides the lane's sampling steps
    rounds: int | None = None  # overrides the lane's rounds per segment
    old_rounds: int = 12  # rounds per block of the earlier protocol
    pool: int = 2  # pairs started at once, outside timed rounds
    load: int = 0  # busy processes beside the workers
    cpu_affinity: tuple[int, ...] | None = None  # overrides the lane's (the timed cores come from it)
    deadline_s: float | None = None  # stop collecting after this long (the results say so)
    sandboxed: bool = True
    overhead_pairs: int = 0  # the sandboxed tree against itself unsandboxed
    tree: Path | None = None  # whose model is timed (default the project root; calibrate: the best worktree)
    out: Path | None = None  # the results file, rewritten after every segment
    quiet: bool = False

    def __post_init__(self) -> None:
        if self.null_pairs < 1:
            raise Refused("a study needs at least one A/A pair (its latency sets the injected sleeps)")
        if self.pool < 1:
            raise Refused(f"--pool {self.pool}: at least one pair is started at a time")
        if any(not 0 < s < 90 for s in self.speedups):
            raise Refused(f"speedups {list(self.speedups)}: each must be between 0 and 90 percent")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> StudyPlan:
        """The engine's command line (`python -m pytest_dit_ar.loop.study`)."""
        try:
            speedups = tuple(float(s) for s in args.speedups.split(",") if s.strip())
            cores = tuple(int(c) for c in args.cpu_affinity.split(",")) if args.cpu_affinity else None
        except ValueError as exc:
            raise Refused(f"--speedups / --cpu-affinity: {exc}") from None
        return cls(args.config, args.lane, args.null_segments, speedups, args.segments_per_speedup, args.steps,
                   args.rounds, args.old_rounds, args.pool, args.load, cores, args.deadline_s, not args.unsandboxed,
                   args.overhead_segments, None, args.out)

    @classmethod
    def calibration(cls, config: Path, lane: str, tree: Path, pairs: int, rounds: int, speedups: Sequence[float],
                    steps: int | None, budget_s: float, out: Path, sandboxed: bool = True) -> StudyPlan:
        """`dit-ar calibrate`'s: A/A pairs of `tree` and 2 pairs per injected speedup, one pair at a time,
        stopped at the budget, the blocks of both protocols of the same length."""
        return cls(Path(config), lane, pairs, tuple(speedups), 2, steps, rounds, rounds, 1, 0, None, budget_s,
                   sandboxed, 0, tree, out, quiet=True)

    def protocol(self, lane: PerfProtocol) -> PerfProtocol:
        return dataclasses.replace(lane, rounds=self.rounds or lane.rounds,
                                   cpu_affinity=self.cpu_affinity or lane.cpu_affinity)

    def wanted(self) -> dict[str, int]:
        """Pairs per arm (the overhead arm only when sandboxed)."""
        out = {NULL: self.null_pairs, **{f"{p:g}": self.pairs_per_speedup for p in self.speedups}}
        if self.overhead_pairs and self.sandboxed:
            out[OVERHEAD] = self.overhead_pairs
        return out


def slowed_copy(root: Path, dest: Path, delay_s: float, mutable: Sequence[str] = ("model_under_test/",)) -> Path:
    """A copy of the tree's mutable paths whose generate() first sleeps delay_s (the 'best' of a speedup arm)."""
    for path in mutable:
        src = root / path.rstrip("/")
        if src.is_dir():
            shutil.copytree(src, dest / path.rstrip("/"), ignore=shutil.ignore_patterns("__pycache__"))
        elif src.is_file():
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / path)
    init = dest / "model_under_test" / "__init__.py"
    init.write_text(init.read_text() + sleep_patch(delay_s, tag="injected"))
    return dest


def _spin() -> None:  # pragma: no cover - runs in the load processes
    while True:
        pass


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


def aa_spread(pairs: Sequence[StudyPair], rounds: int | None = None) -> PairSpread | None:
    """The between-pair spread of A/A segments (both sides the same code): what a calibration measures."""
    if len(pairs) < 2:
        return None
    return PairSpread.of(StudyArm(NULL, tuple(pairs)).log_ratios(rounds))


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


@dataclass(frozen=True)
class PooledEstimate:
    """All of an arm's segments as one estimate: the candidate side's improvement and its 1 - alpha interval."""

    estimate_pct: float
    lower_pct: float
    upper_pct: float
    segments: int

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def pooled(pairs: Sequence[StudyPair], design: Design, rounds: int) -> PooledEstimate | None:
    """All of an arm's segments as one estimate: improvement of the candidate side and its 1 - alpha interval."""
    if len(pairs) < 2:
        return None
    st = look_stats(StudyArm(NULL, tuple(pairs)).log_ratios(rounds)[None], OffsetBound.default("cuda").sd)
    est, se, df = float(st.estimate[0]), float(st.se[0]), float(st.df[0])
    q = float(student.ppf(1 - design.alpha, df))
    lo, hi = sorted((improvement_pct(est + q * se, design.metric), improvement_pct(est - q * se, design.metric)))
    return PooledEstimate(improvement_pct(est, design.metric), lo, hi, len(pairs))


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


# -- collection -----------------------------------------------------------------------------------
def study_pair(seg: SegmentRecord) -> StudyPair:
    return StudyPair(tuple(seg.cand_s), tuple(seg.best_s), seg.warmup_s, seg.build_s, tuple(seg.orders),
                     tuple(seg.unfaithful), seg.forked, seg.ready_s)


class ArmPairs:
    """One arm's pairs, from the experiment's pair code: a `PairSource` over the arm's two trees, forked from
    the sides' fork servers when the lane forks (`performance.fork_server`), else exec'd; `pool` at a time."""

    def __init__(self, plan: MeasurementPlan, launcher: WorkerLauncher, cores: tuple[int, ...] | None, pool: int,
                 forks: ForkServers | None, best_launcher: WorkerLauncher | None = None):
        self.plan, self.forks = plan, forks
        self.source = PairSource(plan, launcher, forks, cores, best_launcher)
        self.source.pool = PoolPlan(pool, 2 * pool, None, None)
        self.watch: GpuWatch | None = None
        self.taken = 0

    def segment(self, left: int, rng: random.Random) -> SegmentRecord:
        """One segment in a fresh pair, closed after it."""
        index = self.taken
        pair = self.source.take(index, left)
        self.taken += 1
        try:
            pair.pin(self.source.cores)
            if self.watch is None:
                self.watch = gpu_watch(pair, self.plan.is_cuda)
            self.source.spawn_ahead(index + 1)
            return run_segment(pair, index, self.plan.prompts, self.plan.batch, self.plan.protocol.rounds,
                               self.plan.warmup_rule(), rng, resolution=self.plan.resolution, watch=self.watch)
        finally:
            pair.close()

    def close(self) -> None:
        self.source.kill()
        if self.forks is not None:
            self.forks.close()


class Collection:
    """The arms of one study on one session's lane, and the folder their logs and slowed copies live in."""

    def __init__(self, plan: StudyPlan, session: Session, protocol: PerfProtocol):
        self.plan, self.session, self.protocol = plan, session, protocol
        self.launcher = launcher_for(session, plan.sandboxed)  # the experiment's launcher and sandbox policy
        self.cores = timed_cores(protocol, session.lane.is_cuda)
        self.tmp = Path(tempfile.mkdtemp(prefix="dit-ar-study-"))
        self.prompts = tuple(c.prompt for c in load_corpus(session.root / session.lane.corpus))
        self.arms: dict[str, ArmPairs] = {}

    def side(self, name: str, root: Path, launcher: WorkerLauncher) -> Side:
        spec = self.session.lane.workload(launcher.model_root(root), self.session.root)
        return Side(name, root, {**spec, "steps": self.plan.steps} if self.plan.steps else spec)

    def add(self, name: str, cand_root: Path, best_root: Path, best_launcher: WorkerLauncher | None = None) -> None:
        lane, p = self.session.lane, self.protocol
        logs = self.tmp / "logs" / name
        logs.mkdir(parents=True, exist_ok=True)
        best = self.side(SIDE_NAMES["best"], best_root, best_launcher or self.launcher)
        plan = MeasurementPlan(self.side(SIDE_NAMES["cand"], cand_root, self.launcher), best, p, self.prompts,
                               lane.batch, lane.primary_metric, lane.guardrails, lane.is_cuda, logs,
                               resolution=lane.resolution)
        forks = None
        if p.fork_server and best_launcher is None:  # fork servers serve one launcher's workers
            for side in {cand_root: plan.cand, best_root: best}.values():
                self.prime(side, logs)
            forks = ForkServers(self.launcher, cand_root, best_root, logs, p.fork_servers(lane.is_cuda)).spawn()
        self.arms[name] = ArmPairs(plan, self.launcher, self.cores, self.plan.pool, forks, best_launcher)

    def prime(self, side: Side, logs: Path) -> None:
        """Fill a tree's compile cache before its fork servers start: an experiment's quality worker is the
        tree's first (cold) worker and the only one that writes the folder (docs/security.md); a study has
        no quality run, so without this one exec'd worker per tree every forked worker found the cache empty
        and compiled again into its throwaway copy (H200, wave 6: a 46-61 s first warm-up round in every
        pair of a CUDA-graphed tree). The cold start (build and first generate) goes into the tree's record."""
        worker = self.launcher.worker(f"{side.name}-cache", side.root, logs / f"cache-{side.name}.log")
        if worker.caches is None:
            return
        worker.spawn()
        if worker.cache_warm:  # set when the worker opened its tree's folder
            worker.kill()
            return
        try:
            worker.handshake()
            started = time.perf_counter()
            worker.request("build", spec=side.spec)
            reqs = [[self.prompts[i % len(self.prompts)], i] for i in range(self.session.lane.batch)]
            worker.generate(reqs, resolution=self.session.lane.resolution)
            worker.note_start(time.perf_counter() - started)
        finally:
            worker.close()

    def ready(self) -> None:
        """Wait for every arm's fork servers (their imports must not overlap a timed round)."""
        for arm in self.arms.values():
            if arm.forks is not None:
                arm.forks.ready()

    def slowed(self, pct: float, delay_s: float) -> Path:
        root = self.plan.tree or self.session.root
        return slowed_copy(root, self.tmp / f"slow{pct:g}", delay_s, self.session.config.mutable_paths)

    def close(self) -> None:
        for arm in self.arms.values():
            arm.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def run_study(plan: StudyPlan) -> StudyResults:
    """Collect the arms (see the module docstring), round-robin, until each has its pairs or the deadline."""
    session = open_session(plan.config, plan.lane, need_session=False)  # refuses a lane that cannot run here
    lane, target = session.lane, session.target
    protocol = plan.protocol(lane.performance)
    root = plan.tree or session.root
    started = time.perf_counter()
    rng = random.SystemRandom()
    results = StudyResults(lane.name, target.lane_id, target.identity.as_dict(), plan.steps or lane.steps, lane.batch,
                           dataclasses.asdict(protocol), {NULL: StudyArm(NULL)}, plan.old_rounds, plan.load,
                           plan.sandboxed, metric=lane.primary_metric)
    wanted = plan.wanted()
    measured = dataclasses.replace(protocol, rounds=max(protocol.rounds, plan.old_rounds))
    collection = Collection(plan, session, measured)
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(plan.load)]
    for s in spinners:
        s.start()

    def record(name: str, seg: SegmentRecord) -> None:
        nonlocal results
        arms = {**results.arms, name: results.arms[name].with_pair(study_pair(seg))}
        results = dataclasses.replace(results, arms=arms, wall_s=time.perf_counter() - started)
        _save(results, plan.out)
        if not plan.quiet:
            print(" ".join(f"{a}:{len(s.pairs)}" for a, s in results.arms.items()), flush=True)

    try:
        collection.add(NULL, root, root)
        first = collection.arms[NULL].segment(wanted[NULL], rng)
        record(NULL, first)
        latency_s = float(np.median(first.best_s))
        arms = dict(results.arms)
        for pct in plan.speedups:
            delay = latency_s * (pct / 100) / (1 - pct / 100)
            collection.add(f"{pct:g}", root, collection.slowed(pct, delay))
            arms[f"{pct:g}"] = StudyArm(f"{pct:g}", (), delay)
        if OVERHEAD in wanted:  # the sandboxed tree against the same tree unsandboxed
            collection.add(OVERHEAD, root, root, launcher_for(session, sandboxed=False))
            arms[OVERHEAD] = StudyArm(OVERHEAD)
        results = dataclasses.replace(results, arms=arms)
        collection.ready()
        while any(len(results.arms[a].pairs) < n for a, n in wanted.items()):
            # the arm furthest behind its quota next, so a deadline leaves the arms in proportion
            name = min((a for a, n in wanted.items() if len(results.arms[a].pairs) < n),
                       key=lambda a: len(results.arms[a].pairs) / wanted[a])
            if plan.deadline_s and time.perf_counter() - started > plan.deadline_s:
                raise TimeoutError
            left = wanted[name] - len(results.arms[name].pairs)
            record(name, collection.arms[name].segment(left, rng))
    except TimeoutError:
        results = dataclasses.replace(results, stopped=f"deadline of {plan.deadline_s:.0f} s reached")
    finally:
        collection.close()
        for s in spinners:
            s.terminate()
    results = dataclasses.replace(results, wall_s=time.perf_counter() - started)
    _save(results, plan.out)
    return results


def summary_of(results: StudyResults, orders: int = 2000) -> dict[str, ArmSummary]:
    """Both protocols on every arm of a study (a file of docs/data, or one just collected)."""
    return summarize(results.arms, results.recorded_protocol(), results.metric, results.old_rounds, orders)


def _save(results: StudyResults, out: Path | None) -> None:
    """Write what is known so far, with its summary (a run cut short still leaves its data)."""
    if out is not None:
        results.write(out, {a: s.as_dict() for a, s in summary_of(results).items()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_dit_ar.loop.study", description=__doc__.splitlines()[0])
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
        plan = StudyPlan.from_args(args)
        results = run_study(plan)
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
