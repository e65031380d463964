"""One segment of a pair: both sides warmed up (each until steady), then paired rounds, each side timed by the
harness's clock while the other side's whole sandbox is frozen, every round's outputs read and checked.

Both sides of a round run the same fresh requests (drawn here), back to back in balanced order (CB/BC
alternating from a random first order). Outputs that repeat for different requests, or candidate outputs that
fail the plan's check against the best's outputs for the same requests, are recorded as problems: the timed work
is not the judged work. Each round's requests and both sides' outputs are also handed to the plan's collector,
which the loop's top scores on the lane's task metrics (loop/evidence.py).
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dit_ar_contract.sides import ROLES, Role, Sides
from perf_suite.warmup import WarmupRule

from ...state.perf_record import MemoryFigures, RoundRecord, SegmentRecord, SideTiming
from ...worker.client import Generated, WorkerProcess
from ...worker.gpu_memory import MemorySampler, nvml_reader
from . import clean_rounds
from .clean_rounds import GpuWatch, NoGpu
from .measurement_plan import RoundCallback, RoundCheck, RoundCollector
from .pairs import Pair

IDLE_WAIT_S = 0.25  # at most this long for the GPU to show no work in flight before a side is timed
MAX_EXCLUDED_PART = 4  # at most one round in this many is excluded (and replaced) for a fall of the best's clock
Requests = list[list[Any]]  # [prompt, seed] per image of a batch


def memory_figures(worker: WorkerProcess, reported: dict[str, Any], sampled: float | None = None,
                   steady_sampled: float | None = None) -> MemoryFigures:
    """Peak memory sampled by the harness (host: the cgroup's anonymous + shared memory; device: NVML at the
    end, and sampled while it ran), the cgroup's own peak and the longest freeze wait, the same samples'
    peaks since warm-up ended (`mark_steady`); the worker's figures for reference."""
    waits = worker.freeze_waits
    steady = getattr(worker, "steady_host_mb", None)  # a stand-in worker of a test may not sample
    steady_gpu = getattr(worker, "steady_gpu_mb", None)
    return MemoryFigures(worker.peak_host_mb(), worker.gpu_memory_mb(), sampled, worker.kernel_peak_mb(),
                         max(waits) * 1e3 if waits else None, reported.get("peak_reserved_mb"),
                         reported.get("peak_allocated_mb"), steady() if steady else None,
                         steady_gpu() if steady_gpu else None, steady_sampled)


def mark_steady(workers: list[Any], found: MemorySampler | None = None) -> None:
    """Warm-up is over: the harness's samplers keep each worker's steady peak from here (the worker is not
    asked anything: it cannot tell that timing starts)."""
    for worker in workers:
        mark = getattr(worker, "mark_steady", None)
        if mark is not None:
            mark()
    if found is not None:
        found.mark_steady()


def sampler(workers: dict[Role, WorkerProcess]) -> MemorySampler | None:
    """An NVML sampler over the workers on a CUDA lane (None on CPU lanes); its sides are the roles' keys."""
    if not any(str(getattr(getattr(w, "target", None), "device", "cpu")).startswith("cuda") for w in workers.values()):
        return None
    return MemorySampler(nvml_reader({role.key: w for role, w in workers.items()})).start()


def sampled_peak(found: MemorySampler | None, role: Role) -> float | None:
    return found.peak(role.key) if found is not None else None


def sampled_steady(found: MemorySampler | None, role: Role) -> float | None:
    return found.steady_peak(role.key) if found is not None else None


def warm_up(worker: WorkerProcess, draw: Callable[[], Requests], rule: WarmupRule, resolution: int | None
            ) -> tuple[list[float], str]:
    """Warm-up rounds of one worker until `rule` says steady or capped; their times and the final state."""
    times: list[float] = []
    state = rule.state(times)
    while state == "warming":
        times.append(worker.generate(draw(), resolution=resolution).seconds)
        state = rule.state(times)
    return times, state


def as_rule(warmup: int | WarmupRule) -> WarmupRule:
    """A fixed count (the study's form) is a rule that stops at exactly that count."""
    if isinstance(warmup, WarmupRule):
        return warmup
    return WarmupRule(min_rounds=warmup, window=max(warmup, 1), tolerance_pct=0.0, max_rounds=warmup)


def timed(pair: Pair, role: Role, requests: Requests, resolution: int | None,
          watch: GpuWatch | None = None, cores: tuple[int, ...] | None = None) -> tuple[Generated, SideTiming]:
    """One timed generate of `role` while the other side's whole sandbox stays frozen: when a helper of the
    frozen side holds a CUDA context, the GPU is first checked for work in flight (NVML; nothing on CPU
    lanes); the GPU's state is read right after. With `cores` every thread of the side is pinned to them
    again first (what a side changed in its last round does not carry into this one)."""
    watch = watch or NoGpu()
    helpers = watch.helpers(set(pair.worker(role.other).helpers()))
    waited, idle = watch.wait_idle(IDLE_WAIT_S) if helpers else (0.0, True)
    worker = pair.worker(role)
    if cores:
        worker.pin(list(cores))
    worker.thaw()
    clocks = clean_rounds.trace(watch)
    start = time.time()
    try:
        got = worker.generate(requests, resolution=resolution)
    finally:
        worker.freeze()
        end, spans = time.time(), clocks.stop()
    return got, SideTiming(start, end, waited, idle, watch.sample(), spans, got.seconds)


def collisions(role: Role, reqs_by_round: list[Requests], outputs: list[Generated]) -> list[str]:
    """Outputs that repeat for different requests (a cached or fake result)."""
    seen: dict[str, tuple] = {}
    found: list[tuple] = []
    for reqs, got in zip(reqs_by_round, outputs):
        for req, image in zip(reqs, got.images):
            fp = hashlib.sha256(image.numpy().tobytes()).hexdigest()
            if fp in seen and seen[fp] != tuple(req):
                found.append((seen[fp], tuple(req)))
            seen[fp] = tuple(req)
    return [collision_problem(role, found)] if found else []


def collision_problem(role: Role, found: list[tuple]) -> str:
    return (f"{role.key}: identical outputs for different requests in {len(found)} cases, e.g. {found[0][0]} and "
            f"{found[0][1]}")


class SegmentRun:
    """One pair's rounds as they are timed: warm-up, then paired rounds in balanced order (CB/BC
    alternating from a random first order), each with fresh seeds; `record()` is what it measured so far.

    Only one side runs at a time (the other is frozen). Every round's order, times and GPU state are
    recorded. Every round's outputs are read by the harness: outputs that repeat for different requests,
    or candidate outputs that fail `check` against the best's outputs for the same requests, are recorded
    as problems (the timed work is not the judged work)."""

    def __init__(self, pair: Pair, index: int, prompts: tuple[str, ...], batch: int, rng: random.Random,
                 resolution: int | None = None, check: RoundCheck | None = None, watch: GpuWatch | None = None,
                 collect: RoundCollector | None = None):
        self.pair, self.index, self.prompts, self.batch, self.rng = pair, index, prompts, batch, rng
        self.resolution, self.check, self.watch, self.collect = resolution, check, watch, collect
        self.cand_first = rng.random() < 0.5
        self.warm: Sides[list[float]] = Sides.of(lambda _: [])
        self.times: Sides[list[float]] = Sides.of(lambda _: [])
        self.seeds: list[list[int]] = []
        self.orders: list[str] = []
        self.problems: list[str] = []
        self.records: list[RoundRecord] = []
        self.seen: Sides[dict[str, tuple]] = Sides.of(lambda _: {})
        self.collisions: Sides[list[tuple]] = Sides.of(lambda _: [])
        self.memory: Sides[dict[str, Any]] = Sides.of(lambda _: {})  # each side's last reply's figures
        self.warmup_state: Sides[str] = Sides("", "")
        self.sampler: MemorySampler | None = None
        self.together_s = 0.0
        self.cores: tuple[int, ...] | None = None  # the timed cores: re-pinned before, checked after each side
        self.escaped: list[str] = []

    def draw(self) -> Requests:
        return [[self.rng.choice(self.prompts), self.rng.randrange(2**31)] for _ in range(self.batch)]

    def warm_up(self, warmup: int | WarmupRule, together: Sides[tuple[int, ...]] | None = None,
                cores: tuple[int, ...] | None = None) -> None:
        """Each side until its own round time is steady (perf_suite.warmup; a count is a fixed rule), on the
        same requests for both. `together` (per side, cores of its own): the first warm-up generate of both
        sides runs at once, each side pinned to its own spare cores, then both go back to the timed `cores` (a
        fresh compiled worker's first generate loads its kernels and captures its graphs: 6-8 s a side on
        the H200, half of a graphed verdict's wall time when the sides took turns; on one shared core at once
        it took as long as in turns). Nothing is timed for the verdict then; the steadiness rule needs later
        rounds, which take turns as before."""
        rule = as_rule(warmup)
        if together and rule.max_rounds > 0:
            self._first_together(together, cores)
        history = self.pair.history
        state = Sides.of(lambda r: rule.state_after(history[r], self.warm[r]))
        while any(v == "warming" for v in state.values()):
            reqs = self.draw()
            for role in ROLES:
                if state[role] == "warming":
                    self.warm[role].append(timed(self.pair, role, reqs, self.resolution, self.watch)[0].seconds)
                    state = state.replace(role, rule.state_after(history[role], self.warm[role]))
        self.warmup_state = state
        mark_steady(list(self.pair.workers.values()), self.sampler)

    def _first_together(self, own: Sides[tuple[int, ...]], cores: tuple[int, ...] | None) -> None:
        reqs = self.draw()
        workers = self.pair.workers
        for role, w in workers.items():
            w.pin(list(own[role]))
        start = time.perf_counter()
        try:
            with ThreadPoolExecutor(len(ROLES)) as pool:
                runs = workers.map(lambda w: pool.submit(w.generate, reqs, resolution=self.resolution))
                for role in ROLES:
                    self.warm[role].append(runs[role].result().seconds)
            self.together_s = time.perf_counter() - start
        finally:
            for w in workers.values():
                w.freeze()
                w.pin(list(cores) if cores else sorted(os.sched_getaffinity(0)))

    def play_round(self) -> float:
        """One paired round; its seconds timed. A round in which the best's SM clock fell is recorded and
        excluded (another takes its place: the same order, fresh requests) while fewer than a quarter of the
        rounds so far were (clean_rounds' docstring)."""
        done = len(self.orders)
        order = clean_rounds.balanced_orders(done + 1, self.cand_first)[-1]
        reqs = self.draw()
        got: dict[Role, Generated] = {}
        timing: dict[Role, SideTiming] = {}
        for role in ROLES if order == "CB" else ROLES[::-1]:
            if not self.cores:
                got[role], timing[role] = timed(self.pair, role, reqs, self.resolution, self.watch)
            else:
                with self.pair.worker(role).affinity_watch(list(self.cores)) as seen:
                    got[role], timing[role] = timed(self.pair, role, reqs, self.resolution, self.watch, self.cores)
                self.escaped += [f"round {done + 1}: {role.key}: {e}" for e in seen.found]
            self.memory = self.memory.replace(role, got[role].memory)
        record = RoundRecord(len(self.records), order, Sides.of(timing.__getitem__))
        excluded = sum(r.excluded for r in self.records)
        record.excluded = record.clock_fell.best and excluded + 1 <= max(1, len(self.records) // MAX_EXCLUDED_PART)
        self.records.append(record)
        for role in ROLES:
            seen = self.seen[role]
            for req, image in zip(reqs, got[role].images):
                fp = hashlib.sha256(image.numpy().tobytes()).hexdigest()
                if fp in seen and seen[fp] != tuple(req):
                    self.collisions[role].append((seen[fp], tuple(req)))
                seen[fp] = tuple(req)
        if self.check is not None:
            self.problems += [f"round {done + 1}: {p}" for p in self.check(got[Role.CANDIDATE], got[Role.BEST])]
        if self.collect is not None:
            self.collect(reqs, got[Role.CANDIDATE], got[Role.BEST])
        spent = got[Role.CANDIDATE].seconds + got[Role.BEST].seconds
        if record.excluded:
            return spent
        for role in ROLES:
            self.times[role].append(got[role].seconds)
        self.seeds.append([s for _, s in reqs])
        self.orders.append(order)
        return spent

    def record(self) -> SegmentRecord:
        pair = self.pair
        problems = self.problems + [collision_problem(role, found) for role, found in self.collisions.items()
                                    if found]
        mem = Sides.of(lambda r: memory_figures(pair.worker(r), self.memory[r], sampled_peak(self.sampler, r),
                                                sampled_steady(self.sampler, r)))
        s = self.sampler
        return SegmentRecord(self.index, list(self.times.candidate), list(self.times.best), list(self.seeds),
                             list(self.orders), self.warm.map(list), pair.build_s, mem,
                             problems[:20], fresh=pair.fresh, rounds=list(self.records), ready_s=pair.ready_s(),
                             forked=pair.forked, warmup_state=self.warmup_state,
                             warm_cache=pair.workers.map(lambda w: getattr(w, "cache_warm", None)),
                             live_peak_mb=s.peak_sum_mb if s else None, together_s=self.together_s,
                             escaped=self.escaped[:20])


def run_segment(pair: Pair, index: int, prompts: tuple[str, ...], batch: int, rounds: int,
                warmup: int | WarmupRule, rng: random.Random, on_round: RoundCallback | None = None,
                resolution: int | None = None, check: RoundCheck | None = None,
                watch: GpuWatch | None = None, warm_cores: Sides[tuple[int, ...]] | None = None,
                cores: tuple[int, ...] | None = None, collect: RoundCollector | None = None) -> SegmentRecord:
    """Warm up both sides (each until steady: perf_suite.warmup; a fresh pair's first generates at once, each
    side on its own `warm_cores`, when given), then time `rounds` paired rounds on `cores` in balanced orders
    with fresh seeds (SegmentRun). On CUDA lanes the harness samples both sides' device memory (NVML)."""
    run = SegmentRun(pair, index, prompts, batch, rng, resolution, check, watch, collect)
    run.cores = cores
    run.sampler = sampler(dict(pair.workers.items()))
    try:
        pair.freeze()
        run.warm_up(warmup, together=warm_cores if pair.fresh else None, cores=cores)
        while len(run.orders) < rounds:  # an excluded round is played again
            run.play_round()
            if on_round:
                on_round(index, len(run.orders), rounds)
        pair.cand.thaw()
        pair.best.thaw()
    finally:
        if run.sampler is not None:
            run.sampler.stop()
    if pair.fresh:
        for role, worker in pair.workers.items():
            note = getattr(worker, "note_start", None)
            if note is not None:
                note(pair.build_s[role] + sum(run.warm[role]))
    return run.record()
