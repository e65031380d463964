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
from perf_suite.sequential import Design, Look, SequentialTest
from perf_suite.warmup import WarmupRule

from ..worker.client import Generated, WorkerLauncher, WorkerProcess
from ..worker.gpu_memory import MemorySampler, nvml_reader
from . import memory_plan

SIDES = ("cand", "best")


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
    memory: memory_plan.MemoryBudget | None = None  # what live workers may hold together (None: not limited)
    known_peaks_mb: dict[str, float | None] = field(default_factory=dict)  # measured before timing (per side)
    cold_start_s: float | None = None  # the candidate tree's first worker: build + first generate (recorded only)

    def warmup_rule(self) -> WarmupRule:
        p = self.protocol
        return WarmupRule(p.warmup_rounds, p.warmup_window, p.warmup_steady_pct, p.warmup_max_rounds)

    def design(self) -> Design:
        p = self.protocol
        return Design(alpha=p.alpha, min_improvement_pct=p.min_improvement_pct,
                      min_segments=min(p.min_segments, self.segments_allowed()),
                      max_segments=self.segments_allowed(), offset_floor_pct=p.offset_floor_pct,
                      spending_gamma=p.spending_gamma, futility_z=p.futility_z, metric=self.metric)

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
    warmup_state: dict[str, str] = field(default_factory=dict)  # per side: "steady" or "capped" (perf_suite.warmup)
    warm_cache: dict[str, bool] = field(default_factory=dict)  # per side: its tree's compile cache was filled before
    layout: str = "pair"  # "pair" (both alive, interleaved) or "alternate" (one side at a time: loop/memory_plan)
    live_peak_mb: float | None = None  # device memory of all live workers together, sampled (NVML)

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "look"}
        d["look"] = self.look.as_dict() if self.look else None
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


def spawn_pair(launcher: WorkerLauncher, cand: Side, best: Side, log_dir: Path, tag: str) -> Pair:
    """Start both workers; they run only the fixed prelude (imports, device) until they are built."""
    return Pair(launcher.worker("candidate", cand.root, log_dir / f"worker-candidate-{tag}.log").spawn(),
                launcher.worker("best", best.root, log_dir / f"worker-best-{tag}.log").spawn())


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
    """Peak memory: RSS and device memory read by the harness (NVML at the end, and sampled while it ran);
    the worker's own figures kept for reference."""
    return {"peak_rss_mb": worker.peak_rss_mb(), "gpu_nvml_mb": worker.gpu_memory_mb(), "gpu_sampled_mb": sampled,
            "peak_reserved_mb": reported.get("peak_reserved_mb"),
            "peak_allocated_mb": reported.get("peak_allocated_mb")}


def _sampler(workers: dict[str, WorkerProcess]) -> MemorySampler | None:
    """An NVML sampler over the workers on a CUDA lane (None on CPU lanes)."""
    if not any(w.target.device.startswith("cuda") for w in workers.values()):
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


def timed(pair: Pair, side: str, requests: list[list[Any]], resolution: int | None) -> Generated:
    """One timed generate of `side` while the other side's whole sandbox stays frozen."""
    worker = pair.worker(side)
    worker.thaw()
    try:
        return worker.generate(requests, resolution=resolution)
    finally:
        worker.freeze()


def run_segment(pair: Pair, index: int, prompts: tuple[str, ...], batch: int, rounds: int,
                warmup: int | WarmupRule, rng: random.Random, on_round: RoundCallback | None = None,
                resolution: int | None = None, check: RoundCheck | None = None) -> SegmentRecord:
    """Warm up both sides (each until steady: perf_suite.warmup), then time `rounds` paired rounds in random
    order with fresh seeds. On CUDA lanes the harness samples both sides' device memory (NVML) meanwhile.

    Only one side runs at a time (the other is frozen). Every round's outputs are read by the harness:
    outputs that repeat for different requests, or candidate outputs that fail `check` against the best's
    outputs for the same requests, are recorded as problems (the timed work is not the judged work)."""
    sampler = _sampler({side: pair.worker(side) for side in SIDES})
    try:
        return _paired_rounds(pair, index, prompts, batch, rounds, _as_rule(warmup), rng, on_round, resolution,
                              check, sampler)
    finally:
        if sampler is not None:
            sampler.stop()


def _paired_rounds(pair: Pair, index: int, prompts: tuple[str, ...], batch: int, rounds: int, rule: WarmupRule,
                   rng: random.Random, on_round: RoundCallback | None, resolution: int | None,
                   check: RoundCheck | None, sampler: MemorySampler | None) -> SegmentRecord:
    def draw() -> list[list[Any]]:
        return [[rng.choice(prompts), rng.randrange(2**31)] for _ in range(batch)]

    pair.cand.freeze()
    pair.best.freeze()
    warm: dict[str, list[float]] = {"cand": [], "best": []}
    state = {side: rule.state([]) for side in SIDES}
    while any(v == "warming" for v in state.values()):  # the same requests for both, each until its own steady
        reqs = draw()
        for side in SIDES:
            if state[side] == "warming":
                warm[side].append(timed(pair, side, reqs, resolution).seconds)
                state[side] = rule.state(warm[side])
    times: dict[str, list[float]] = {"cand": [], "best": []}
    seeds, orders, problems = [], [], []
    seen: dict[str, dict[str, tuple]] = {"cand": {}, "best": {}}
    collisions: dict[str, list[tuple]] = {"cand": [], "best": []}
    memory: dict[str, dict[str, Any]] = {"cand": {}, "best": {}}
    for done in range(rounds):
        reqs = draw()
        first = rng.choice(SIDES)
        got: dict[str, Generated] = {}
        for side in (first, "best" if first == "cand" else "cand"):
            got[side] = timed(pair, side, reqs, resolution)
            times[side].append(got[side].seconds)
            memory[side] = got[side].memory
        for side in SIDES:
            for req, image in zip(reqs, got[side].images):
                fp = hashlib.sha256(image.numpy().tobytes()).hexdigest()
                if fp in seen[side] and seen[side][fp] != tuple(req):
                    collisions[side].append((seen[side][fp], tuple(req)))
                seen[side][fp] = tuple(req)
        if check is not None:
            problems += [f"round {done + 1}: {p}" for p in check(got["cand"], got["best"])]
        seeds.append([s for _, s in reqs])
        orders.append("CB" if first == "cand" else "BC")
        if on_round:
            on_round(index, done + 1, rounds)
    pair.cand.thaw()
    pair.best.thaw()
    problems += [f"{side}: identical outputs for different requests in {len(found)} cases, e.g. {found[0][0]} and "
                 f"{found[0][1]}" for side, found in collisions.items() if found]
    if sampler is not None:
        sampler.stop()
    mem = {side: _memory(pair.worker(side), memory[side], sampler.peak(side) if sampler else None) for side in SIDES}
    if pair.fresh:
        for side in SIDES:
            pair.worker(side).note_start(pair.build_s.get(side, 0.0) + sum(warm[side]))
    return SegmentRecord(index, times["cand"], times["best"], seeds, orders, warm, dict(pair.build_s), mem,
                         problems[:20], fresh=pair.fresh, warmup_state=state,
                         warm_cache={side: pair.worker(side).cache_warm for side in SIDES},
                         live_peak_mb=sampler.peak_sum_mb if sampler else None)


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


def run_alternating_segment(launcher: WorkerLauncher, plan: MeasurementPlan, index: int, first: str,
                            rng: random.Random, on_round: RoundCallback | None = None) -> SegmentRecord:
    """One segment with one worker alive at a time (loop/memory_plan: the pair does not fit the card).

    The sides run in `memory_plan.order(index, first)`: a fresh worker of the first side is built, warms up
    (until steady) and runs the segment's requests, then exits; a fresh worker of the other side runs the
    same requests. Round i of each side is paired (same requests, different processes, `rounds` rounds
    apart in time); the sequential test's between-segment term carries what separates the two processes,
    and swapping the order every segment cancels a drift in time (docs/perf-harness.md)."""
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
    live_peak = 0.0
    for k, side in enumerate(sides):
        cfg = plan.cand if side == "cand" else plan.best
        worker = launcher.worker(cfg.name, cfg.root, plan.log_dir / f"worker-{cfg.name}-segment{index}.log").spawn()
        try:
            sampler = _sampler({side: worker})
            try:
                build_s[side] = boot(worker, cfg.spec)
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
            worker.close()
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
                         layout="alternate", live_peak_mb=live_peak or None)


@dataclass
class PerfOutcome:
    keep: bool
    reasons: list[str]
    segments: list[SegmentRecord]
    seconds: dict[str, float]
    guardrails: dict[str, Any]

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
        return {"keep": self.keep, "reasons": self.reasons, "seconds": self.seconds, "rounds": self.rounds,
                "startup": self.startup(),
                "guardrails": self.guardrails, "look": self.look.as_dict() if self.look else None,
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


def _paired_segment(plan: MeasurementPlan, launcher: WorkerLauncher, index: int, pair: Pair | None,
                    ahead: Pair | None, rng: random.Random, on_round: RoundCallback | None,
                    seconds: dict[str, float]) -> tuple[SegmentRecord, Pair | None]:
    """One segment of the paired protocol (both workers alive, interleaved rounds), and the pair for the next
    segment when it was started ahead (overlap_startup)."""
    p = plan.protocol
    t0 = time.perf_counter()
    if pair is None:
        spawned = ahead or spawn_pair(launcher, plan.cand, plan.best, plan.log_dir, f"segment{index}")
        ahead = None
        pair = build_pair(spawned, plan.cand, plan.best, p.cpu_affinity)
    else:
        pair.pin(p.cpu_affinity)
    seconds["startup"] += time.perf_counter() - t0
    try:
        if ahead is None and p.overlap_startup and index + 1 < plan.segments_allowed():
            ahead = spawn_pair(launcher, plan.cand, plan.best, plan.log_dir, f"segment{index + 1}")
        seg = run_segment(pair, index, plan.prompts, plan.batch, p.rounds, plan.warmup_rule(), rng, on_round,
                          plan.resolution, plan.check)
        pair.close()
    except BaseException:
        for left in (pair, ahead):
            if left is not None:
                left.kill()
        raise
    for side in SIDES:
        pair.worker(side).note_peak(seg.peak_memory_mb(side) if plan.is_cuda else None)
    return seg, ahead


def measure(plan: MeasurementPlan, launcher: WorkerLauncher, first_pair: Pair | None = None,
            on_round: RoundCallback | None = None, on_look: Callable[[Look], None] | None = None) -> PerfOutcome:
    """The whole performance verdict: segments in fresh worker pairs until the sequential test decides."""
    rng = random.SystemRandom()
    test = SequentialTest(plan.design())
    segments: list[SegmentRecord] = []
    seconds = {"startup": 0.0, "warmup": 0.0, "timed": 0.0}
    guard_info: dict[str, Any] = {}
    pair: Pair | None = first_pair  # workers already booted (the quality run's candidate and a best)
    ahead: Pair | None = None  # the next segment's workers, started during this one (overlap_startup)
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
                for left in (pair, ahead):  # the card cannot hold the first pair nor a pair started ahead
                    if left is not None:
                        left.close()
                pair = ahead = None
                seg = run_alternating_segment(launcher, plan, index, first_alone, rng, on_round)
                seconds["startup"] += sum(seg.build_s.values())
            else:
                current, pair = pair, None  # _paired_segment closes it (or kills it on a failure)
                seg, ahead = _paired_segment(plan, launcher, index, current, ahead, rng, on_round, seconds)
            for side in SIDES:
                seen = seg.peak_memory_mb(side) if plan.is_cuda else None
                if seen:
                    peaks[side] = max(peaks[side] or 0.0, seen)
            seconds["warmup"] += sum(seg.warmup_s["cand"]) + sum(seg.warmup_s["best"])
            seconds["timed"] += sum(seg.cand_s) + sum(seg.best_s)
            seg.look = test.add(seg.cand_s, seg.best_s)
            segments.append(seg)
            if on_look:
                on_look(seg.look)
            if seg.unfaithful:
                return PerfOutcome(False, [f"segment {index + 1}: {msg}" for msg in seg.unfaithful[:5]], segments,
                                   seconds, guard_info)
            problems, figures = _guardrails(plan, segments, final=seg.look.final)
            guard_info.update(figures)
            if plan.roofline_ms and seg.median_ms("cand") < plan.roofline_ms:
                problems.append(f"candidate median {seg.median_ms('cand'):.2f} ms is below the roofline "
                                f"floor {plan.roofline_ms:.2f} ms: the measurement cannot be right")
            if problems:
                return PerfOutcome(False, [f"segment {index + 1}: {msg}" for msg in problems], segments, seconds,
                                   guard_info)
            if seg.look.final:
                return PerfOutcome(seg.look.decision == "keep", [seg.look.reason], segments, seconds, guard_info)
        raise AssertionError("the sequential test always decides by its last segment")
    finally:
        for left in (pair, ahead):
            if left is not None:
                left.kill()
