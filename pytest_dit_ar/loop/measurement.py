"""Timing candidate against best, each side in its own worker process (DESIGN §6), segment by segment.

A *segment* is one pair of fresh workers, warmed up, then timed for `rounds` paired rounds: both sides
run the same fresh requests (drawn here), back to back in a random order, each round trip timed by the
harness's own clock. After each segment the sequential test (perf_suite.sequential) looks at all
segments so far and keeps, discards or asks for another segment in new processes. Replies carry output
outputs in its scratch folder, which the harness reads, hashes and compares with the best's outputs for the
same requests, so cached, fake or cheaper outputs are caught; and only one side runs at a time: the
other side's whole sandbox is frozen while a side is timed.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dit_ar_contract.config import Guardrails, PerfProtocol
from dit_ar_contract.errors import Refused
from perf_suite import guardrails as guard
from perf_suite.sequential import Design, Look, OffsetBound, PairSpread, SequentialTest
from perf_suite.warmup import WarmupRule

from ..state.runs import RunPaths
from ..worker.client import Generated, WorkerLauncher, WorkerProcess
from ..worker.forkserver import ForkedWorker, ForkServers
from ..worker.gpu_memory import MemorySampler, nvml_reader
from . import clean_rounds, memory_plan
from .clean_rounds import GpuWatch, NoGpu, RoundRecord, SideTiming
from .pool import PoolPlan, pairs_that_fit

SIDES = ("cand", "best")
SIDE_NAMES = {"cand": "candidate", "best": "best"}  # a side's key in the records -> its workers' and logs' name
IDLE_WAIT_S = 0.25  # at most this long for the GPU to show no work in flight before a side is timed


@dataclass(frozen=True)
class Side:
    """One side of an A/B measurement: its name, the tree it runs and the workload it builds."""

    name: str
    root: Path
    spec: dict[str, Any]


@dataclass(frozen=True)
class MeasurementPlan:
    """Everything `measure` needs besides the workers."""

    cand: Side
    best: Side
    protocol: PerfProtocol
    prompts: tuple[str, ...]
    batch: int
    metric: str
    guardrails: Guardrails = field(default_factory=Guardrails)
    is_cuda: bool = False
    log_dir: Path = Path(".")
    roofline_ms: float | None = None
    max_segments: int | None = None  # overrides the protocol's (the baseline's A/A run takes one)
    resolution: int | None = None  # the lane's: outputs of another size break the seam
    check: RoundCheck | None = None  # candidate vs best outputs of every timed round
    bound: OffsetBound | None = None  # the session's bound on the between-process sd (state.noise)
    memory: memory_plan.MemoryBudget | None = None  # what live workers may hold together (None: not limited)
    known_peaks_mb: dict[str, float | None] = field(default_factory=dict)  # measured before timing (per side)
    cold_start_s: float | None = None  # the candidate tree's first worker: build + first generate (recorded only)

    def warmup_rule(self) -> WarmupRule:
        p = self.protocol
        return WarmupRule(p.warmup_rounds, p.warmup_window, p.warmup_steady_pct, p.warmup_max_rounds)

    def design(self) -> Design:
        return Design.from_protocol(self.protocol, self.metric, self.max_segments)

    def offset_bound(self) -> OffsetBound:
        return self.bound or OffsetBound.default("cuda" if self.is_cuda else "cpu")

    def segments_allowed(self) -> int:
        return self.max_segments or self.protocol.max_segments


@dataclass
class SegmentRecord:
    """What one segment measured (times in seconds, per round, per side)."""

    index: int
    cand_s: list[float]
    best_s: list[float]
    seeds: list[list[int]]
    orders: list[str]
    warmup_s: dict[str, list[float]]
    build_s: dict[str, float]
    memory: dict[str, dict[str, float | None]]
    unfaithful: list[str]  # the timed outputs are not the judged work (a quality failure)
    look: Look | None = None
    fresh: bool = True  # both workers started for this segment (their build and warm-up are a first use)
    rounds: list[RoundRecord] = field(default_factory=list)  # per round: order, times, GPU state
    ready_s: dict[str, float] = field(default_factory=dict)  # forked workers: fork request to hello
    forked: bool = False  # the pair came from the fork servers
    warmup_state: dict[str, str] = field(default_factory=dict)  # per side: "steady" or "capped" (perf_suite.warmup)
    warm_cache: dict[str, bool] = field(default_factory=dict)  # per side: its tree's compile cache was filled before
    layout: str = "pair"  # "pair" (both alive, interleaved) or "alternate" (one side at a time: loop/memory_plan)
    live_peak_mb: float | None = None  # device memory of all live workers together, sampled (NVML)
    spawn_s: float = 0.0  # alternate layout: starting its workers' processes (to their hello), both sides
    close_s: float = 0.0  # alternate layout: closing them (the card's memory given back)
    together_s: float = 0.0  # wall time of the first warm-up generates run at once (GPU lanes), else 0

    @property
    def warmup_wall_s(self) -> float:
        """The warm-up's wall time: both sides' rounds, the first generates run at once counted once."""
        total = sum(self.warmup_s["cand"]) + sum(self.warmup_s["best"])
        if self.together_s and self.warmup_s["cand"] and self.warmup_s["best"]:
            total -= self.warmup_s["cand"][0] + self.warmup_s["best"][0] - self.together_s
        return total

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("look", "rounds")}
        d["look"] = self.look.as_dict() if self.look else None
        d["rounds"] = [r.as_dict() for r in self.rounds]
        d["flagged_rounds"] = clean_rounds.flagged(self.rounds)
        return d

    def median_ms(self, side: str) -> float:
        return float(np.median(self.cand_s if side == "cand" else self.best_s)) * 1e3

    def startup_s(self, side: str) -> float:
        """Build plus warm-up rounds of the side's fresh worker (where loading and compilation cost show)."""
        return self.build_s.get(side, 0.0) + sum(self.warmup_s[side])

    def peak_memory_mb(self, side: str) -> float | None:
        """The side's peak memory as trusted by the harness: device memory on GPUs, resident set on CPUs."""
        mem = self.memory[side]
        gpu = [v for v in (mem.get("gpu_nvml_mb"), mem.get("gpu_sampled_mb"), mem.get("peak_reserved_mb")) if v]
        return max(gpu) if gpu else mem.get("peak_rss_mb")


@dataclass
class Pair:
    cand: WorkerProcess
    best: WorkerProcess
    build_s: dict[str, float] = field(default_factory=dict)
    fresh: bool = True  # False: the candidate already generated the corpus (its warm-up is not a first use)

    @property
    def forked(self) -> bool:
        return isinstance(self.cand, ForkedWorker) and isinstance(self.best, ForkedWorker)

    def ready_s(self) -> dict[str, float]:
        """Forked workers' fork-to-hello times (the harness's clock); empty for exec'd workers."""
        out = {}
        for side in SIDES:
            worker = self.worker(side)
            if isinstance(worker, ForkedWorker) and worker.ready_s is not None:
                out[side] = worker.ready_s
        return out

    def freeze(self) -> None:
        self.cand.freeze()
        self.best.freeze()

    def worker(self, side: str) -> WorkerProcess:
        return self.cand if side == "cand" else self.best

    def pin(self, cores: tuple[int, ...] | None) -> None:
        self.cand.pin(cores)
        self.best.pin(cores)

    def close(self) -> None:
        self.cand.close()
        self.best.close()

    def kill(self) -> None:
        self.cand.kill()
        self.best.kill()


def boot(worker: WorkerProcess, spec: dict[str, Any]) -> float:
    """Wait for a spawned worker's hello and build its pipeline; returns the build time in seconds as the
    harness's clock saw it (the worker's own figure is not trusted)."""
    worker.handshake()
    t0 = time.perf_counter()
    worker.request("build", spec=spec)
    return time.perf_counter() - t0


def spawn_pair(launcher: WorkerLauncher, cand: Side, best: Side, log_dir: Path, tag: str,
               best_launcher: WorkerLauncher | None = None) -> Pair:
    """Start both workers; they run only the fixed prelude (imports, device) until they are built. The best
    side may come from another launcher (the study's sandbox-overhead arm: the same tree unsandboxed)."""
    logs = RunPaths(log_dir)
    name = SIDE_NAMES
    return Pair(launcher.worker(name["cand"], cand.root, logs.worker_log(name["cand"], tag)).spawn(),
                (best_launcher or launcher).worker(name["best"], best.root, logs.worker_log(name["best"], tag)).spawn())


def build_pair(pair: Pair, cand: Side, best: Side, affinity: tuple[int, ...] | None = None) -> Pair:
    """Build both sides' pipelines in parallel; a failure on either side is a CandidateCrash."""
    with ThreadPoolExecutor(2) as pool:
        futures = {"cand": pool.submit(boot, pair.cand, cand.spec), "best": pool.submit(boot, pair.best, best.spec)}
        try:
            pair.build_s = {k: f.result() for k, f in futures.items()}
        except BaseException:
            pair.kill()
            raise
    pair.pin(affinity)
    return pair


def start_pair(launcher: WorkerLauncher, cand: Side, best: Side, log_dir: Path, tag: str,
               affinity: tuple[int, ...] | None = None) -> Pair:
    """Start and build a fresh pair."""
    return build_pair(spawn_pair(launcher, cand, best, log_dir, tag), cand, best, affinity)


def _memory(worker: WorkerProcess, reported: dict[str, Any], sampled: float | None = None) -> dict[str, float | None]:
    """Peak memory sampled by the harness (host: the cgroup's anonymous + shared memory, kept under the old
    key; device: NVML at the end, and sampled while it ran), the cgroup's own peak and the longest freeze
    wait; the worker's figures for reference."""
    waits = worker.freeze_waits
    return {"peak_rss_mb": worker.peak_host_mb(), "gpu_nvml_mb": worker.gpu_memory_mb(), "gpu_sampled_mb": sampled,
            "kernel_peak_mb": worker.kernel_peak_mb(),
            "freeze_wait_max_ms": max(waits) * 1e3 if waits else None,
            "peak_reserved_mb": reported.get("peak_reserved_mb"),
            "peak_allocated_mb": reported.get("peak_allocated_mb")}


def _sampler(workers: dict[str, WorkerProcess]) -> MemorySampler | None:
    """An NVML sampler over the workers on a CUDA lane (None on CPU lanes)."""
    if not any(str(getattr(getattr(w, "target", None), "device", "cpu")).startswith("cuda") for w in workers.values()):
        return None
    return MemorySampler(nvml_reader(workers)).start()


def warm_up(worker: WorkerProcess, side: str, draw: Callable[[], list[list[Any]]], rule: WarmupRule,
            resolution: int | None, run: Callable[[str, list[list[Any]]], Generated] | None = None
            ) -> tuple[list[float], str]:
    """Warm-up rounds of one worker until `rule` says steady or capped; their times and the final state."""
    times: list[float] = []
    state = rule.state(times)
    while state == "warming":
        reqs = draw()
        got = run(side, reqs) if run else worker.generate(reqs, resolution=resolution)
        times.append(got.seconds)
        state = rule.state(times)
    return times, state


def _as_rule(warmup: int | WarmupRule) -> WarmupRule:
    """A fixed count (the study's and older callers' form) is a rule that stops at exactly that count."""
    if isinstance(warmup, WarmupRule):
        return warmup
    return WarmupRule(min_rounds=warmup, window=max(warmup, 1), tolerance_pct=0.0, max_rounds=warmup)


RoundCallback = Callable[[int, int, int], None]  # (segment index, rounds done in it, rounds per segment)
RoundCheck = Callable[[Generated, Generated], list[str]]  # candidate vs best outputs of the same requests


def timed(pair: Pair, side: str, requests: list[list[Any]], resolution: int | None,
          watch: GpuWatch | None = None) -> tuple[Generated, SideTiming]:
    """One timed generate of `side` while the other side's whole sandbox stays frozen: when a helper of the
    frozen side holds a CUDA context, the GPU is first checked for work in flight (NVML; nothing on CPU
    lanes); the GPU's state is read right after."""
    watch = watch or NoGpu()
    other = pair.worker("best" if side == "cand" else "cand")
    helpers = watch.helpers(set(other.helpers()))
    waited, idle = watch.wait_idle(IDLE_WAIT_S) if helpers else (0.0, True)
    worker = pair.worker(side)
    worker.thaw()
    start = time.time()
    try:
        got = worker.generate(requests, resolution=resolution)
    finally:
        worker.freeze()
    return got, SideTiming(start, time.time(), waited, idle, watch.sample())


class SegmentRun:
    """One pair's rounds as they are timed: warm-up, then paired rounds in balanced order (CB/BC
    alternating from a random first order), each with fresh seeds; `record()` is what it measured so far.

    Only one side runs at a time (the other is frozen). Every round's order, times and GPU state are
    recorded. Every round's outputs are read by the harness: outputs that repeat for different requests,
    or candidate outputs that fail `check` against the best's outputs for the same requests, are recorded
    as problems (the timed work is not the judged work)."""

    def __init__(self, pair: Pair, index: int, prompts: tuple[str, ...], batch: int, rng: random.Random,
                 resolution: int | None = None, check: RoundCheck | None = None, watch: GpuWatch | None = None):
        self.pair, self.index, self.prompts, self.batch, self.rng = pair, index, prompts, batch, rng
        self.resolution, self.check, self.watch = resolution, check, watch
        self.cand_first = rng.random() < 0.5
        self.warm: dict[str, list[float]] = {"cand": [], "best": []}
        self.times: dict[str, list[float]] = {"cand": [], "best": []}
        self.seeds: list[list[int]] = []
        self.orders: list[str] = []
        self.problems: list[str] = []
        self.records: list[RoundRecord] = []
        self.seen: dict[str, dict[str, tuple]] = {"cand": {}, "best": {}}
        self.collisions: dict[str, list[tuple]] = {"cand": [], "best": []}
        self.memory: dict[str, dict[str, Any]] = {"cand": {}, "best": {}}
        self.warmup_state: dict[str, str] = {}
        self.sampler: MemorySampler | None = None
        self.together_s = 0.0

    def draw(self) -> list[list[Any]]:
        return [[self.rng.choice(self.prompts), self.rng.randrange(2**31)] for _ in range(self.batch)]

    def warm_up(self, warmup: int | WarmupRule, together: dict[str, tuple[int, ...]] | None = None,
                cores: tuple[int, ...] | None = None) -> None:
        """Each side until its own round time is steady (perf_suite.warmup; a count is a fixed rule), on the
        same requests for both. `together` (per side, cores of its own): the first warm-up generate of both
        sides runs at once, each side pinned to its own spare cores, then both go back to the timed `cores` (a
        fresh compiled worker's first generate loads its kernels and captures its graphs: 6-8 s a side on
        the H200, half of a graphed verdict's wall time when the sides took turns; on one shared core at once
        it took as long as in turns). Nothing is timed for the verdict then; the steadiness rule needs later
        rounds, which take turns as before."""
        rule = _as_rule(warmup)
        if together and rule.max_rounds > 0:
            self._first_together(together, cores)
        state = {side: rule.state(self.warm[side]) for side in SIDES}
        while any(v == "warming" for v in state.values()):
            reqs = self.draw()
            for side in SIDES:
                if state[side] == "warming":
                    self.warm[side].append(timed(self.pair, side, reqs, self.resolution, self.watch)[0].seconds)
                    state[side] = rule.state(self.warm[side])
        self.warmup_state = state

    def _first_together(self, own: dict[str, tuple[int, ...]], cores: tuple[int, ...] | None) -> None:
        reqs = self.draw()
        workers = {side: self.pair.worker(side) for side in SIDES}
        for side, w in workers.items():
            w.pin(list(own[side]))
        start = time.perf_counter()
        try:
            with ThreadPoolExecutor(len(SIDES)) as pool:
                runs = {side: pool.submit(w.generate, reqs, resolution=self.resolution) for side, w in workers.items()}
                for side in SIDES:
                    self.warm[side].append(runs[side].result().seconds)
            self.together_s = time.perf_counter() - start
        finally:
            for w in workers.values():
                w.freeze()
                w.pin(list(cores) if cores else sorted(os.sched_getaffinity(0)))

    def play_round(self) -> None:
        done = len(self.orders)
        order = clean_rounds.balanced_orders(done + 1, self.cand_first)[-1]
        reqs = self.draw()
        got: dict[str, Generated] = {}
        timing: dict[str, SideTiming] = {}
        for side in (("cand", "best") if order == "CB" else ("best", "cand")):
            got[side], timing[side] = timed(self.pair, side, reqs, self.resolution, self.watch)
            self.times[side].append(got[side].seconds)
            self.memory[side] = got[side].memory
        self.records.append(RoundRecord(done, order, timing))
        for side in SIDES:
            for req, image in zip(reqs, got[side].images):
                fp = hashlib.sha256(image.numpy().tobytes()).hexdigest()
                if fp in self.seen[side] and self.seen[side][fp] != tuple(req):
                    self.collisions[side].append((self.seen[side][fp], tuple(req)))
                self.seen[side][fp] = tuple(req)
        if self.check is not None:
            self.problems += [f"round {done + 1}: {p}" for p in self.check(got["cand"], got["best"])]
        self.seeds.append([s for _, s in reqs])
        self.orders.append(order)

    def record(self) -> SegmentRecord:
        pair = self.pair
        problems = self.problems + [
            f"{side}: identical outputs for different requests in {len(found)} cases, e.g. {found[0][0]} and "
            f"{found[0][1]}" for side, found in self.collisions.items() if found]
        s = self.sampler
        mem = {side: _memory(pair.worker(side), self.memory[side], s.peak(side) if s else None) for side in SIDES}
        return SegmentRecord(self.index, list(self.times["cand"]), list(self.times["best"]), list(self.seeds),
                             list(self.orders), {k: list(v) for k, v in self.warm.items()}, dict(pair.build_s), mem,
                             problems[:20], fresh=pair.fresh, rounds=list(self.records), ready_s=pair.ready_s(),
                             forked=pair.forked, warmup_state=dict(self.warmup_state),
                             warm_cache={side: getattr(pair.worker(side), "cache_warm", None) for side in SIDES},
                             live_peak_mb=s.peak_sum_mb if s else None, together_s=self.together_s)


def run_segment(pair: Pair, index: int, prompts: tuple[str, ...], batch: int, rounds: int,
                warmup: int | WarmupRule, rng: random.Random, on_round: RoundCallback | None = None,
                resolution: int | None = None, check: RoundCheck | None = None,
                watch: GpuWatch | None = None, warm_cores: dict[str, tuple[int, ...]] | None = None,
                cores: tuple[int, ...] | None = None) -> SegmentRecord:
    """Warm up both sides (each until steady: perf_suite.warmup; a fresh pair's first generates at once, each
    side on its own `warm_cores`, when given), then time `rounds` paired rounds on `cores` in balanced orders
    with fresh seeds (SegmentRun). On CUDA lanes the harness samples both sides' device memory (NVML)."""
    run = SegmentRun(pair, index, prompts, batch, rng, resolution, check, watch)
    run.sampler = _sampler({side: pair.worker(side) for side in SIDES})
    try:
        pair.freeze()
        run.warm_up(warmup, together=warm_cores if pair.fresh else None, cores=cores)
        for done in range(rounds):
            run.play_round()
            if on_round:
                on_round(index, done + 1, rounds)
        pair.cand.thaw()
        pair.best.thaw()
    finally:
        if run.sampler is not None:
            run.sampler.stop()
    if pair.fresh:
        for side in SIDES:
            note = getattr(pair.worker(side), "note_start", None)
            if note is not None:
                note(pair.build_s.get(side, 0.0) + sum(run.warm[side]))
    return run.record()


def _collisions(side: str, reqs_by_round: list[list[list[Any]]], outputs: list[Generated]) -> list[str]:
    """Outputs that repeat for different requests (a cached or fake result)."""
    seen: dict[str, tuple] = {}
    found: list[tuple] = []
    for reqs, got in zip(reqs_by_round, outputs):
        for req, image in zip(reqs, got.images):
            fp = hashlib.sha256(image.numpy().tobytes()).hexdigest()
            if fp in seen and seen[fp] != tuple(req):
                found.append((seen[fp], tuple(req)))
            seen[fp] = tuple(req)
    return [f"{side}: identical outputs for different requests in {len(found)} cases, e.g. {found[0][0]} and "
            f"{found[0][1]}"] if found else []


def _one_worker(launcher: WorkerLauncher, forks: ForkServers | None, side: str, cfg: Side, log_dir: Path,
                index: int) -> WorkerProcess:
    """A fresh worker of one side: forked from its fork server when there is one, else exec'd."""
    if forks is None:
        return launcher.worker(cfg.name, cfg.root, log_dir / f"worker-{cfg.name}-segment{index}.log").spawn()
    forks.ready()
    return (forks.cand if side == "cand" else forks.best).fork(f"segment{index}")


def _count_alternating(seconds: dict[str, float], seg: SegmentRecord, wall_s: float) -> None:
    """An alternating segment's wall time in the experiment's phases: its processes' start and build as
    startup, their close as teardown, warm-up and timed rounds, and the rest (reading and checking the
    outputs, the memory sampler) as round checks, as a pair's segment counts them."""
    parts = {"startup": seg.spawn_s + sum(seg.build_s.values()), "teardown": seg.close_s,
             "warmup": seg.warmup_wall_s,
             "timed": sum(seg.cand_s) + sum(seg.best_s)}
    parts["round_checks"] = max(0.0, wall_s - sum(parts.values()))
    for phase, spent in parts.items():
        seconds[phase] = seconds.get(phase, 0.0) + spent


def run_alternating_segment(launcher: WorkerLauncher, plan: MeasurementPlan, index: int, first: str,
                            rng: random.Random, on_round: RoundCallback | None = None,
                            forks: ForkServers | None = None) -> SegmentRecord:
    """One segment with one worker alive at a time (loop/memory_plan: the pair does not fit the card).

    The sides run in `memory_plan.order(index, first)`: a fresh worker of the first side is built, warms up
    (until steady) and runs the segment's requests, then exits; a fresh worker of the other side runs the
    same requests (forked from the side's fork server when the experiment has them, as a pair's workers
    are: a zygote holds no device memory). Round i of each side is paired (same requests, different
    processes, `rounds` rounds apart in time); the sequential test's between-segment term carries what
    separates the two processes, and swapping the order every segment cancels a drift in time
    (docs/perf-harness.md)."""
    rule = plan.warmup_rule()
    requests = [[[rng.choice(plan.prompts), rng.randrange(2**31)] for _ in range(plan.batch)]
                for _ in range(plan.protocol.rounds)]
    sides = memory_plan.order(index, first)
    got: dict[str, list[Generated]] = {}
    warm: dict[str, list[float]] = {}
    state: dict[str, str] = {}
    build_s: dict[str, float] = {}
    mem: dict[str, dict[str, float | None]] = {}
    warm_cache: dict[str, bool] = {}
    live_peak = spawn_s = close_s = 0.0
    for k, side in enumerate(sides):
        cfg = plan.cand if side == "cand" else plan.best
        t_spawn = time.perf_counter()
        worker = _one_worker(launcher, forks, side, cfg, plan.log_dir, index)
        spawn_s += time.perf_counter() - t_spawn
        try:
            sampler = _sampler({side: worker})
            try:
                build_s[side] = boot(worker, cfg.spec)
                if forks is not None and isinstance(worker, ForkedWorker):
                    (forks.cand if side == "cand" else forks.best).note_ready(worker)
                worker.pin(plan.protocol.cpu_affinity)
                warm[side], state[side] = warm_up(worker, side, lambda: [[rng.choice(plan.prompts),
                                                                          rng.randrange(2**31)]
                                                                         for _ in range(plan.batch)],
                                                  rule, plan.resolution)
                worker.note_start(build_s[side] + sum(warm[side]))
                got[side] = []
                for done, reqs in enumerate(requests):
                    got[side].append(worker.generate(reqs, resolution=plan.resolution))
                    if on_round:
                        on_round(index, k * len(requests) // 2 + (done + 1) // 2, len(requests))
            finally:
                if sampler is not None:
                    sampler.stop()
            mem[side] = _memory(worker, got[side][-1].memory if got[side] else {},
                                sampler.peak(side) if sampler else None)
            worker.note_peak(mem[side].get("gpu_sampled_mb") or mem[side].get("gpu_nvml_mb"))
            live_peak = max(live_peak, sampler.peak_sum_mb if sampler else 0.0)
            warm_cache[side] = worker.cache_warm
        finally:
            t_close = time.perf_counter()
            worker.close()
            close_s += time.perf_counter() - t_close
    problems: list[str] = []
    for side in SIDES:
        problems += _collisions(side, requests, got[side])
    if plan.check is not None:
        for done, (c, b) in enumerate(zip(got["cand"], got["best"])):
            problems += [f"round {done + 1}: {p}" for p in plan.check(c, b)]
    order_tag = "CB" if sides[0] == "cand" else "BC"
    return SegmentRecord(index, [g.seconds for g in got["cand"]], [g.seconds for g in got["best"]],
                         [[s for _, s in reqs] for reqs in requests], [order_tag] * len(requests), warm, build_s,
                         mem, problems[:20], fresh=True, warmup_state=state, warm_cache=warm_cache,
                         forked=forks is not None, layout="alternate", live_peak_mb=live_peak or None,
                         spawn_s=spawn_s, close_s=close_s)


def timed_cores(protocol: PerfProtocol, is_cuda: bool) -> tuple[int, ...] | None:
    """The cores both workers of a timed pair are pinned to (`pair_cores`): one shared core, so that both
    sides see the same host state (H200: pair spread 3.4% on one core vs 9-12% on two), or the lane's
    cpu_affinity as given. "auto" is one core on CUDA lanes (a launch-bound worker needs one) and the
    affinity on CPU lanes (a CPU worker computes with all its threads)."""
    mode = protocol.pair_cores
    if mode == "auto":
        mode = "one" if is_cuda else "affinity"
    if mode == "affinity":
        return protocol.cpu_affinity
    allowed = sorted(protocol.cpu_affinity or os.sched_getaffinity(0))
    return (allowed[0] if protocol.cpu_affinity else allowed[-1],)


def spare_cores(timed: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """Cores this process may use outside the timed ones (where a pair started ahead may run), or None."""
    if not timed:
        return None
    spare = tuple(sorted(set(os.sched_getaffinity(0)) - set(timed)))
    return spare or None


def warm_cores(timed: tuple[int, ...] | None, is_cuda: bool) -> dict[str, tuple[int, ...]] | None:
    """Cores of its own for each side's first warm-up generate (GPU lanes with two spare cores or more: the
    spare cores split in halves), or None (the sides take turns from the first generate on)."""
    spare = spare_cores(timed) if is_cuda else None
    if not spare or len(spare) < 2:
        return None
    half = len(spare) // 2
    return {"cand": spare[:half], "best": spare[half:]}


def gpu_watch(pair: Pair, is_cuda: bool) -> GpuWatch:
    """NVML readings of the GPUs the pair's workers use (after their build), or none on CPU lanes."""
    if not is_cuda:
        return NoGpu()
    uuids = sorted({*pair.cand.gpu_memory_per_device_mb(), *pair.best.gpu_memory_per_device_mb()})
    return clean_rounds.NvmlWatch(uuids) if uuids else NoGpu()


@dataclass
class PerfOutcome:
    keep: bool
    reasons: list[str]
    segments: list[SegmentRecord]
    seconds: dict[str, float]
    guardrails: dict[str, Any]
    pool: dict[str, Any] = field(default_factory=dict)  # fork servers' start and fork times, the pool plan
    spread: PairSpread | None = None  # the pairs' spread, for the session's pool (state.noise)

    @property
    def rounds_flagged(self) -> str | None:
        """One line when a timed round had a throttled side or a busy GPU before it (clean_rounds)."""
        return clean_rounds.summary([r for s in self.segments for r in s.rounds])

    @property
    def unfaithful(self) -> list[str]:
        """What the harness found wrong with the timed outputs themselves (judged as quality, not speed)."""
        return [p for s in self.segments for p in s.unfaithful]

    @property
    def look(self) -> Look | None:
        return self.segments[-1].look if self.segments else None

    @property
    def rounds(self) -> int:
        return sum(len(s.cand_s) for s in self.segments)

    def median_ms(self, side: str) -> float | None:
        samples = [t for s in self.segments for t in (s.cand_s if side == "cand" else s.best_s)]
        return float(np.median(samples)) * 1e3 if samples else None

    def p95_ms(self, side: str) -> float | None:
        samples = [t for s in self.segments for t in (s.cand_s if side == "cand" else s.best_s)]
        return float(np.percentile(samples, 95)) * 1e3 if samples else None

    @property
    def nominal_p(self) -> float | None:
        """The fixed-sample one-sided p-value of the last look's z (the boundary, not 0.01, decides)."""
        from scipy.stats import norm

        return float(norm.cdf(self.look.z)) if self.look and math.isfinite(self.look.z) else None

    def peak_memory_mb(self, side: str = "cand") -> float | None:
        peaks = [m for m in (s.peak_memory_mb(side) for s in self.segments) if m is not None]
        return max(peaks) if peaks else None

    def startup(self) -> dict[str, Any]:
        """Warm-up rounds per side and segment, warm and cold start-up, and how the workers shared the memory."""
        g = self.guardrails
        return {"warmup_rounds": {side: [len(s.warmup_s[side]) for s in self.segments] for side in SIDES},
                "warmup_state": {side: [s.warmup_state.get(side, "") for s in self.segments] for side in SIDES},
                "cand_warm_startup_s": g.get("cand_warm_startup_s"), "best_startup_s": g.get("best_startup_s"),
                "startup_growth_pct": g.get("startup_growth_pct"), "startup_budget_s": g.get("startup_budget_s"),
                "cand_cold_start_s": g.get("cand_cold_start_s"), "layouts": [s.layout for s in self.segments],
                "memory_layout": g.get("memory_layout"),
                "live_peak_mb": max((s.live_peak_mb for s in self.segments if s.live_peak_mb), default=None)}

    def startup_line(self) -> str:
        """The summary's line: warm-up rounds each side needed, warm start against the budget, cold compile."""
        st = self.startup()

        def rounds(side: str) -> str:
            counts, states = st["warmup_rounds"][side], st["warmup_state"][side]
            capped = sum(1 for x in states if x == "capped")
            return "/".join(map(str, counts)) + (f" ({capped} capped)" if capped else "")

        parts = [f"warm-up rounds per segment: candidate {rounds('cand')}, best {rounds('best')}"]
        if st["cand_warm_startup_s"] is not None:
            text = f"warm start {st['cand_warm_startup_s']:.1f} s"
            if st["startup_budget_s"]:
                text += f" (budget {st['startup_budget_s']:g} s)"
            if st["best_startup_s"] is not None and st["startup_growth_pct"] is not None:
                text += f", best {st['best_startup_s']:.1f} s ({st['startup_growth_pct']:+.0f}%)"
            parts.append(text)
        if st["cand_cold_start_s"] is not None:
            parts.append(f"cold start {st['cand_cold_start_s']:.1f} s (the tree's first worker: build + first "
                         "generate, where a compile happens; recorded, not judged)")
        if "alternate" in st["layouts"]:
            parts.append("one side at a time: " + str(st["memory_layout"]))
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {"startup": self.startup(), "keep": self.keep, "reasons": self.reasons, "seconds": self.seconds,
                "rounds": self.rounds,
                "guardrails": self.guardrails, "pool": self.pool, "rounds_flagged": self.rounds_flagged,
                "spread": self.spread.as_dict() if self.spread else None,
                "look": self.look.as_dict() if self.look else None,
                "segments": [s.as_dict() for s in self.segments]}


def _guardrails(plan: MeasurementPlan, segments: list[SegmentRecord], final: bool) -> tuple[list[str], dict]:
    """Memory (every segment), the warm start-up and tail latency (all segments' figures, judged at the end)."""
    peaks = {side: max((m for m in (s.peak_memory_mb(side) for s in segments) if m is not None), default=None)
             for side in SIDES}
    g = plan.guardrails
    if plan.is_cuda:
        budget = g.peak_vram_gb * 1024.0 if g.peak_vram_gb else None
        if g.emulated_vram_gb and plan.memory is not None and plan.memory.mb is not None:
            budget = min(budget or plan.memory.mb, plan.memory.mb)  # one worker may not exceed the emulated card
    else:
        budget = g.peak_memory_mb
    mem = guard.memory(peaks["cand"], peaks["best"], budget)
    growth = guard.memory_growth(peaks["cand"], peaks["best"], g.memory_growth_pct)
    fresh = [s for s in segments if s.fresh]
    warm = [s for s in fresh if s.warm_cache.get("cand") is not False]  # cache filled (or no caches at all)
    starts = {side: [s.startup_s(side) for s in warm if s.warm_cache.get(side) is not False] for side in SIDES}
    startup = guard.startup_growth(starts["cand"], starts["best"], g.startup_growth_pct)
    start_budget = guard.startup_budget(starts["cand"], g.startup_budget_s)
    tail = guard.tail_latency([t for s in segments for t in s.cand_s], [t for s in segments for t in s.best_s],
                              g.p95_regression_pct)
    problems = [r.problem for r in (mem, growth) if r.problem]
    if final:  # judged on every segment's figures: one slow start or one tail is noise until the end
        problems += [r.problem for r in (start_budget, tail) if r.problem]
    cold = {"cand_cold_start_s": plan.cold_start_s} if plan.cold_start_s is not None else {}
    return problems, {**mem.figures, **growth.figures, **startup.figures, **start_budget.figures, **cold,
                      **tail.figures}


class PairSource:
    """Where the pairs come from: the fork servers (after the quality run's pair), else fresh exec'd
    pairs; built outside timed rounds (one at a time for segments, all of them for concurrent pairs), the
    ones waiting frozen. `pool` is the memory plan (loop/pool.py) from the first pair's measured peaks."""

    def __init__(self, plan: MeasurementPlan, launcher: WorkerLauncher, forks: ForkServers | None,
                 cores: tuple[int, ...] | None, best_launcher: WorkerLauncher | None = None):
        self.plan, self.launcher, self.forks, self.cores = plan, launcher, forks, cores
        self.best_launcher = best_launcher  # exec'd pairs only: the best side's own launcher (None: the same)
        self.waiting: list[Pair] = []
        self.ahead: Pair | None = None  # an exec'd pair spawned during a segment (overlap_startup, spare cores)
        self.pool = PoolPlan(1, 2, None, None)
        self.started = 0

    def size_from(self, seg: SegmentRecord, most: int = 1) -> None:
        """Size the pool from the sides' measured peaks and the lane's budget (device memory on GPUs,
        the host's available memory on CPUs)."""
        g = self.plan.guardrails
        budget = g.peak_vram_gb * 1024.0 if self.plan.is_cuda and g.peak_vram_gb else None
        if not self.plan.is_cuda:
            budget = _available_mb()
        self.pool = pairs_that_fit(seg.peak_memory_mb("cand"), seg.peak_memory_mb("best"), budget, most)

    def take(self, index: int, left: int) -> Pair:
        if not self.waiting:
            self.waiting = self.start(index, max(1, min(self.pool.pairs, left)))
        return self.waiting.pop(0)

    def start(self, index: int, n: int) -> list[Pair]:
        """Fork (or spawn) and build `n` pairs outside timed rounds; each is frozen once built."""
        plan = self.plan
        if self.forks is not None:
            spawned = [Pair(*self.forks.fork_pair(f"segment{index + i}")) for i in range(n)]
        else:
            spawned = [self.ahead] if self.ahead else []
            self.ahead = None
            spawned += [spawn_pair(self.launcher, plan.cand, plan.best, plan.log_dir, f"segment{index + i}",
                                   self.best_launcher) for i in range(len(spawned), n)]
        pairs = []
        try:
            for p in spawned:
                pairs.append(build_pair(p, plan.cand, plan.best, self.cores))
                p.freeze()  # a pair waiting for its segment does not run during another's rounds
        except BaseException:
            for p in spawned:
                p.kill()
            raise
        if self.forks is not None:
            for p in pairs:
                self.forks.cand.note_ready(p.cand)  # type: ignore[arg-type]
                self.forks.best.note_ready(p.best)  # type: ignore[arg-type]
        return pairs

    def spawn_ahead(self, index: int) -> None:
        """Exec'd pairs only: start the next pair's prelude during this segment, pinned to cores no timed
        worker uses; without spare cores nothing starts during timed rounds (review finding 1.7.4)."""
        spare = spare_cores(self.cores)
        if self.forks is not None or self.waiting or not self.plan.protocol.overlap_startup or not spare:
            return
        self.ahead = spawn_pair(self.launcher, self.plan.cand, self.plan.best, self.plan.log_dir, f"segment{index}",
                                self.best_launcher)
        self.ahead.pin(spare)

    def kill(self) -> None:
        for p in [*self.waiting, *([self.ahead] if self.ahead else [])]:
            p.kill()
        self.waiting, self.ahead = [], None

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"plan": self.pool.as_dict(), "timed_cores": list(self.cores) if self.cores else None,
                             "fork_servers": self.forks is not None}
        if self.forks is not None:
            d["fork_times"] = self.forks.times()
        return d


def _available_mb() -> float | None:
    try:
        for line in open("/proc/meminfo", encoding="ascii"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def measure(plan: MeasurementPlan, launcher: WorkerLauncher, first_pair: Pair | None = None,
            on_round: RoundCallback | None = None, on_look: Callable[[Look], None] | None = None,
            forks: ForkServers | None = None) -> PerfOutcome:
    """The whole performance verdict: segments in fresh worker pairs until the sequential test decides.

    The first pair may be the quality run's; the others come from `forks` (the sides' fork servers)
    when given, else from fresh exec'd workers. No pair starts or builds during timed rounds."""
    p = plan.protocol
    rng = random.SystemRandom()
    test = SequentialTest(plan.design(), plan.offset_bound())
    segments: list[SegmentRecord] = []
    seconds = {"startup": 0.0, "warmup": 0.0, "timed": 0.0}
    guard_info: dict[str, Any] = {}
    cores = timed_cores(p, plan.is_cuda)
    source = PairSource(plan, launcher, forks, cores)
    pair: Pair | None = first_pair  # workers already booted (the quality run's candidate and a best)
    watch: GpuWatch | None = None

    def outcome(keep: bool, reasons: list[str], spread: PairSpread | None = None) -> PerfOutcome:
        return PerfOutcome(keep, reasons, segments, seconds, guard_info, source.as_dict(), spread)

    if test.design.concurrent:  # performance.pairs > 1: rounds dealt over concurrent pairs
        try:
            return measure_concurrent(plan, test, source, first_pair, forks, on_round, on_look, seconds)
        finally:
            source.kill()
    peaks = {side: plan.known_peaks_mb.get(side) for side in SIDES}
    first_alone = rng.choice(SIDES)  # alternating segments: which side goes first in even segments
    try:
        for index in range(plan.segments_allowed()):
            layout = memory_plan.layout(plan.memory, peaks["cand"], peaks["best"]) if plan.memory else None
            if layout is not None and layout.mode == "refuse":
                raise Refused(layout.reason)
            if layout is not None:
                guard_info["memory_layout"] = layout.reason
            if layout is not None and layout.mode == "alternate":
                if pair is not None:  # the card cannot hold the first pair
                    pair.close()
                    pair = None
                t_seg = time.perf_counter()
                seg = run_alternating_segment(launcher, plan, index, first_alone, rng, on_round, forks)
                _count_alternating(seconds, seg, time.perf_counter() - t_seg)
                seg.look = test.add(seg.cand_s, seg.best_s)
                segments.append(seg)
                if on_look:
                    on_look(seg.look)
                if seg.unfaithful:
                    return outcome(False, [f"segment {index + 1}: {msg}" for msg in seg.unfaithful[:5]])
                problems, figures = _guardrails(plan, segments, final=seg.look.final)
                guard_info.update(figures)
                if problems:
                    return outcome(False, [f"segment {index + 1}: {msg}" for msg in problems])
                if seg.look.final:
                    return outcome(seg.look.decision == "keep", [seg.look.reason], test.spread())
                continue
            t0 = time.perf_counter()
            if pair is None:
                pair = source.take(index, plan.segments_allowed() - index)
            if forks is not None:
                t_wait = time.perf_counter()
                forks.ready()  # the fork servers' imports never overlap timed rounds
                waited = time.perf_counter() - t_wait
                seconds["fork_servers_wait"] = seconds.get("fork_servers_wait", 0.0) + waited
                t0 += waited
            pair.pin(cores)
            if watch is None:
                watch = gpu_watch(pair, plan.is_cuda)
            seconds["startup"] += time.perf_counter() - t0
            source.spawn_ahead(index + 1)
            t_seg = time.perf_counter()
            seg = run_segment(pair, index, plan.prompts, plan.batch, p.rounds, plan.warmup_rule(), rng, on_round,
                              plan.resolution, plan.check, watch, warm_cores=warm_cores(cores, plan.is_cuda),
                              cores=cores)
            for side in SIDES:
                seen = seg.peak_memory_mb(side) if plan.is_cuda else None
                if seen:
                    peaks[side] = max(peaks[side] or 0.0, seen)
                note_peak = getattr(pair.worker(side), "note_peak", None)
                if note_peak is not None:
                    note_peak(seen)
            t_close = time.perf_counter()
            # between the round trips: reading, hashing and checking the outputs, freezing, the GPU watch
            seconds["round_checks"] = seconds.get("round_checks", 0.0) + (t_close - t_seg) - sum(
                seg.cand_s + seg.best_s) - seg.warmup_wall_s
            pair.close()
            pair = None
            seconds["teardown"] = seconds.get("teardown", 0.0) + time.perf_counter() - t_close
            seconds["warmup"] += seg.warmup_wall_s
            seconds["timed"] += sum(seg.cand_s) + sum(seg.best_s)
            seg.look = test.add(seg.cand_s, seg.best_s)
            segments.append(seg)
            if index == 0:
                source.size_from(seg)
            if on_look:
                on_look(seg.look)
            if seg.unfaithful:
                return outcome(False, [f"segment {index + 1}: {msg}" for msg in seg.unfaithful[:5]])
            problems, figures = _guardrails(plan, segments, final=seg.look.final)
            guard_info.update(figures)
            if plan.roofline_ms and seg.median_ms("cand") < plan.roofline_ms:
                problems.append(f"candidate median {seg.median_ms('cand'):.2f} ms is below the roofline "
                                f"floor {plan.roofline_ms:.2f} ms: the measurement cannot be right")
            if problems:
                return outcome(False, [f"segment {index + 1}: {msg}" for msg in problems])
            if seg.look.final:
                return outcome(seg.look.decision == "keep", [seg.look.reason], test.spread())
        raise AssertionError("the sequential test always decides by its last segment")
    finally:
        if pair is not None:
            pair.kill()
        source.kill()


def measure_concurrent(plan: MeasurementPlan, test: Any, source: PairSource, first_pair: Pair | None,
                       forks: ForkServers | None, on_round: RoundCallback | None,
                       on_look: Callable[[Look], None] | None, seconds: dict[str, float]) -> PerfOutcome:
    """The concurrent layout (review §4): `design.pairs` pairs started and warmed before any timed round,
    then rounds dealt round-robin over them (each pair alternating CB/BC), a look whenever the test's
    next look point is reached (`test.next_look()`: pairs and rounds per pair; `test.update`)."""
    m = int(test.design.pairs)
    p = plan.protocol
    pairs: list[Pair] = [first_pair] if first_pair is not None else []
    runs: list[SegmentRun] = []
    rng = random.SystemRandom()
    try:
        t0 = time.perf_counter()
        if forks is not None:
            forks.ready()
        if pairs:
            _refuse_unless_fits(plan, source, pairs[0], m)
        while len(pairs) < m:
            pairs += source.start(len(pairs), m - len(pairs))
        for pair in pairs:
            pair.pin(source.cores)
            pair.freeze()
        watch = gpu_watch(pairs[0], plan.is_cuda)
        runs = [SegmentRun(pair, i, plan.prompts, plan.batch, rng, plan.resolution, plan.check, watch)
                for i, pair in enumerate(pairs)]
        seconds["startup"] += time.perf_counter() - t0
        for run in runs:
            run.warm_up(p.warmup_rounds)
            seconds["warmup"] += sum(run.warm["cand"]) + sum(run.warm["best"])
        while (point := test.next_look()) is not None:
            while min(len(r.orders) for r in runs[:point.pairs]) < point.rounds:
                for run in runs[:point.pairs]:
                    if len(run.orders) < point.rounds:
                        run.play_round()
                        seconds["timed"] += run.times["cand"][-1] + run.times["best"][-1]
                if on_round:
                    on_round(0, min(len(r.orders) for r in runs[:point.pairs]), point.rounds)
            segments = [r.record() for r in runs[:point.pairs]]
            look = test.update([s.cand_s for s in segments], [s.best_s for s in segments])
            segments[-1].look = look
            if on_look:
                on_look(look)
            done = PerfOutcome(False, [], segments, seconds, {}, source.as_dict())
            unfaithful = [f"pair {s.index + 1}: {msg}" for s in segments for msg in s.unfaithful]
            if unfaithful:
                done.reasons = unfaithful[:5]
                return done
            problems, done.guardrails = _guardrails(plan, segments, final=look.final)
            if problems:
                done.reasons = problems
                return done
            if look.final:
                done.keep, done.reasons, done.spread = look.decision == "keep", [look.reason], test.spread()
                return done
        raise AssertionError("the sequential test always decides by its last look")
    except BaseException:
        for pair in pairs:
            pair.kill()
        raise
    finally:
        for pair in pairs:
            pair.close()


def _refuse_unless_fits(plan: MeasurementPlan, source: PairSource, pair: Pair, m: int) -> None:
    """Concurrent pairs hold their memory together: refuse when `m` pairs of the first pair's size do not
    fit the budget (the measured peaks so far: the quality run's corpus)."""
    seg = SegmentRecord(0, [], [], [], [], {"cand": [], "best": []}, {},
                        {side: _memory(pair.worker(side), {}) for side in SIDES}, [])
    source.size_from(seg, most=m)
    if source.pool.pairs < m and source.pool.per_pair_mb:
        raise Refused(f"performance.pairs = {m} concurrent pairs need {m * source.pool.per_pair_mb:.0f} MB but "
                      f"{source.pool.budget_mb:.0f} MB fit {source.pool.pairs}: set performance.pairs to "
                      f"{max(1, source.pool.pairs)}")
