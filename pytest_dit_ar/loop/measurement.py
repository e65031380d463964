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
from perf_suite import guardrails as guard
from perf_suite.sequential import Design, Look, SequentialTest

from ..state.runs import RunPaths
from ..worker.client import Generated, WorkerLauncher, WorkerProcess

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
        gpu = [v for v in (mem.get("gpu_nvml_mb"), mem.get("peak_reserved_mb")) if v]
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
    logs = RunPaths(log_dir)
    return Pair(launcher.worker("candidate", cand.root, logs.worker_log("candidate", tag)).spawn(),
                launcher.worker("best", best.root, logs.worker_log("best", tag)).spawn())


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


def _memory(worker: WorkerProcess, reported: dict[str, Any]) -> dict[str, float | None]:
    """Peak memory: RSS and device memory read by the harness; the worker's own figure kept for reference."""
    return {"peak_rss_mb": worker.peak_rss_mb(), "gpu_nvml_mb": worker.gpu_memory_mb(),
            "peak_reserved_mb": reported.get("peak_reserved_mb"),
            "peak_allocated_mb": reported.get("peak_allocated_mb")}


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


def run_segment(pair: Pair, index: int, prompts: tuple[str, ...], batch: int, rounds: int, warmup: int,
                rng: random.Random, on_round: RoundCallback | None = None, resolution: int | None = None,
                check: RoundCheck | None = None) -> SegmentRecord:
    """Warm up both sides, then time `rounds` paired rounds in random order with fresh seeds.

    Only one side runs at a time (the other is frozen). Every round's outputs are read by the harness:
    outputs that repeat for different requests, or candidate outputs that fail `check` against the best's
    outputs for the same requests, are recorded as problems (the timed work is not the judged work)."""
    def draw() -> list[list[Any]]:
        return [[rng.choice(prompts), rng.randrange(2**31)] for _ in range(batch)]

    pair.cand.freeze()
    pair.best.freeze()
    warm: dict[str, list[float]] = {"cand": [], "best": []}
    for _ in range(warmup):
        reqs = draw()
        for side in SIDES:
            warm[side].append(timed(pair, side, reqs, resolution).seconds)
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
    mem = {side: _memory(pair.worker(side), memory[side]) for side in SIDES}
    return SegmentRecord(index, times["cand"], times["best"], seeds, orders, warm, dict(pair.build_s), mem,
                         problems[:20], fresh=pair.fresh)


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

    def as_dict(self) -> dict[str, Any]:
        return {"keep": self.keep, "reasons": self.reasons, "seconds": self.seconds, "rounds": self.rounds,
                "guardrails": self.guardrails, "look": self.look.as_dict() if self.look else None,
                "segments": [s.as_dict() for s in self.segments]}


def _guardrails(plan: MeasurementPlan, segments: list[SegmentRecord], final: bool) -> tuple[list[str], dict]:
    """Memory (every segment) and tail latency (all segments' samples, judged at the end)."""
    peaks = {side: max((m for m in (s.peak_memory_mb(side) for s in segments) if m is not None), default=None)
             for side in SIDES}
    g = plan.guardrails
    if plan.is_cuda:
        budget = g.peak_vram_gb * 1024.0 if g.peak_vram_gb else None
    else:
        budget = g.peak_memory_mb
    mem = guard.memory(peaks["cand"], peaks["best"], budget)
    growth = guard.memory_growth(peaks["cand"], peaks["best"], g.memory_growth_pct)
    fresh = [s for s in segments if s.fresh]
    startup = guard.startup_growth([s.startup_s("cand") for s in fresh], [s.startup_s("best") for s in fresh],
                                   g.startup_growth_pct)
    tail = guard.tail_latency([t for s in segments for t in s.cand_s], [t for s in segments for t in s.best_s],
                              g.p95_regression_pct)
    problems = [r.problem for r in (mem, growth) if r.problem]
    if final:  # judged on every segment's figures: one slow start or one tail is noise until the end
        problems += [r.problem for r in (startup, tail) if r.problem]
    return problems, {**mem.figures, **growth.figures, **startup.figures, **tail.figures}


def measure(plan: MeasurementPlan, launcher: WorkerLauncher, first_pair: Pair | None = None,
            on_round: RoundCallback | None = None, on_look: Callable[[Look], None] | None = None) -> PerfOutcome:
    """The whole performance verdict: segments in fresh worker pairs until the sequential test decides."""
    p = plan.protocol
    rng = random.SystemRandom()
    test = SequentialTest(plan.design())
    segments: list[SegmentRecord] = []
    seconds = {"startup": 0.0, "warmup": 0.0, "timed": 0.0}
    guard_info: dict[str, Any] = {}
    pair: Pair | None = first_pair  # workers already booted (the quality run's candidate and a best)
    ahead: Pair | None = None  # the next segment's workers, started during this one (overlap_startup)
    try:
        for index in range(plan.segments_allowed()):
            t0 = time.perf_counter()
            if pair is None:
                spawned = ahead or spawn_pair(launcher, plan.cand, plan.best, plan.log_dir, f"segment{index}")
                ahead = None
                pair = build_pair(spawned, plan.cand, plan.best, p.cpu_affinity)
            else:
                pair.pin(p.cpu_affinity)
            seconds["startup"] += time.perf_counter() - t0
            if p.overlap_startup and index + 1 < plan.segments_allowed():
                ahead = spawn_pair(launcher, plan.cand, plan.best, plan.log_dir, f"segment{index + 1}")
            seg = run_segment(pair, index, plan.prompts, plan.batch, p.rounds, p.warmup_rounds, rng, on_round,
                              plan.resolution, plan.check)
            pair.close()
            pair = None
            seconds["warmup"] += sum(seg.warmup_s["cand"]) + sum(seg.warmup_s["best"])
            seconds["timed"] += sum(seg.cand_s) + sum(seg.best_s)
            seg.look = test.add(seg.cand_s, seg.best_s)
            segments.append(seg)
            if on_look:
                on_look(seg.look)
            if seg.unfaithful:
                return PerfOutcome(False, [f"segment {index + 1}: {msg}" for msg in seg.unfaithful[:5]], segments,
                                   seconds, guard_info)
            problems, guard_info = _guardrails(plan, segments, final=seg.look.final)
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
