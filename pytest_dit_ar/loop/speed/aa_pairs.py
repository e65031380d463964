"""Fresh worker pairs of the best against itself (A/A), and against a copy of itself slowed by a known fraction,
measured exactly as an experiment measures them: what `dit-ar calibrate` collects (loop/speed/calibration.py).

Pairs come from the experiment's own code: its launcher (loop/workers/launch.py `launcher_for`, with the same sandbox
policy: git, the state, the project's mutable paths and the corpora hidden) and its pair code
(loop/speed/measurement.py: `PairSource`, pairs forked from each side's fork servers when the lane's
`performance.fork_server` is on, built outside timed rounds, waiting pairs frozen, both sides pinned to the
timed cores, warm-up until steady, then paired rounds in balanced order with fresh seeds). The no-op arm
(`null`) times the tree against itself; a speedup arm times it against a copy whose `generate()` first sleeps a
set fraction of the measured latency (loop/speed/patching.py `sleep_patch`), so the tree is truly faster by that
fraction. Arms are measured round-robin (a segment of each in turn), so a change in the machine's load reaches
all of them; every pair is closed after its segment. A plan may also ask for a sandbox-overhead arm (the
sandboxed tree against itself unsandboxed), `load` busy processes beside the workers and pools of pairs started
at once: knobs the calibration leaves off and the lab's measured study (lab/studies/, not shipped) turns.

What runs is a `StudyPlan`; what it measured is a `perf_suite.studies.StudyResults` (typed, with a format
version), rewritten after every segment so that a run cut short still leaves its data. `aa_spread` and `pooled`
read an arm's pairs: the between-pair spread and the arm's pooled estimate.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import t as student

from dit_ar_contract.config import PerfProtocol
from dit_ar_contract.errors import Refused
from perf_suite.sequential import Design, OffsetBound, PairSpread, improvement_pct, look_stats
from perf_suite.studies import NULL, OVERHEAD, StudyArm, StudyPair, StudyResults
from quality_suite.corpora import load_corpus

from ...state.perf_record import SegmentRecord
from ...state.session import Session, open_session
from ...worker.client import WorkerLauncher
from ...worker.forkserver import ForkServers
from ..workers import first_worker
from ..workers.launch import launcher_for
from .clean_rounds import GpuWatch
from .measurement_plan import MeasurementPlan, Side
from .pairs import SIDE_NAMES, PairSource, gpu_watch, timed_cores
from .patching import sleep_patch
from .pool import PoolPlan
from .segment import run_segment

Summarizer = Callable[[StudyResults], dict[str, Any]]  # derived data written beside the results (a study's)


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
    old_rounds: int = 12  # segments are measured at least this long (a study's block of the earlier protocol)
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
    def calibration(cls, config: Path, lane: str, tree: Path, pairs: int, rounds: int, speedups: Sequence[float],
                    steps: int | None, budget_s: float, out: Path, sandboxed: bool = True) -> StudyPlan:
        """`dit-ar calibrate`'s: A/A pairs of `tree` and 2 pairs per injected speedup, one pair at a time,
        stopped at the budget, every segment `rounds` long."""
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


# -- reading an arm's pairs (pure) ----------------------------------------------------------------
def aa_spread(pairs: Sequence[StudyPair], rounds: int | None = None) -> PairSpread | None:
    """The between-pair spread of A/A segments (both sides the same code): what a calibration measures."""
    if len(pairs) < 2:
        return None
    return PairSpread.of(StudyArm(NULL, tuple(pairs)).log_ratios(rounds))


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
                               self.plan.warmup_rule(), rng, resolution=self.plan.resolution, watch=self.watch,
                               cores=self.source.cores)
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
        """Fill a tree's compile cache before its fork servers start, as an experiment does before its quality run
        (loop/workers/first_worker.py): without it every forked worker of a study found the cache empty and compiled
        again into its throwaway copy (on an H200 a 46-61 s first warm-up round in every pair of a CUDA-graphed
        tree). The cold start (build and first generate) goes into the tree's record."""
        lane = self.session.lane
        first_worker.fill_cache(self.launcher, f"{side.name}-cache", side.root, side.spec, self.prompts, lane.batch,
                                lane.resolution, logs / f"cache-{side.name}.log")

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


def run_study(plan: StudyPlan, summarize: Summarizer | None = None) -> StudyResults:
    """Collect the arms (see the module docstring), round-robin, until each has its pairs or the deadline;
    `summarize` (a study's) adds its derived summary to the file each time it is written."""
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
        _save(results, plan.out, summarize)
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
    _save(results, plan.out, summarize)
    return results


def _save(results: StudyResults, out: Path | None, summarize: Summarizer | None) -> None:
    """Write what is known so far (a run cut short still leaves its data), with the summary if one is given."""
    if out is not None:
        results.write(out, summarize(results) if summarize is not None else None)
