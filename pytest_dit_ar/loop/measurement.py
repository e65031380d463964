"""Interleaved A/B timing of candidate and best, each in its own worker process (DESIGN §6).

The harness times every round trip with its own clock. Every round uses fresh seeds drawn here, the
same for both sides; replies carry output fingerprints (computed on the host, which forces the device
to finish) and a coarse sketch of the images so that cached or fake outputs are caught.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dit_ar_contract.config import Guardrails, PerfProtocol
from dit_ar_contract.errors import CandidateCrash
from perf_suite import guardrails as guard
from perf_suite.stats import BlockStats, decide_block

from ..worker.client import WorkerLauncher, WorkerProcess

MAX_SKETCH_DIVERGENCE = 0.2  # mean |difference| of 4x4-pooled images in [0, 1] between the two sides


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
    max_blocks: int = 2


@dataclass
class Block:
    index: int
    cand_s: list[float]
    best_s: list[float]
    seeds: list[list[int]]
    orders: list[str]
    warmup_s: dict[str, list[float]]
    build_s: dict[str, float]
    memory: dict[str, dict[str, float | None]]
    divergence: float
    problems: list[str]
    stats: BlockStats | None = None

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "stats"}
        d["stats"] = self.stats.as_dict() if self.stats else None
        return d

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
    """Wait for a spawned worker's hello and build its pipeline; returns the build time in seconds."""
    return worker.handshake().request("build", spec=spec)["build_s"]


def start_pair(launcher: WorkerLauncher, cand: Side, best: Side, log_dir: Path, tag: str,
               affinity: tuple[int, ...] | None = None) -> Pair:
    """Start and build both workers in parallel; a failure on either side is a CandidateCrash."""
    pair = Pair(launcher.worker("candidate", cand.root, log_dir / f"worker-candidate-{tag}.log").spawn(),
                launcher.worker("best", best.root, log_dir / f"worker-best-{tag}.log").spawn())
    with ThreadPoolExecutor(2) as pool:
        futures = {"cand": pool.submit(boot, pair.cand, cand.spec), "best": pool.submit(boot, pair.best, best.spec)}
        try:
            pair.build_s = {k: f.result() for k, f in futures.items()}
        except BaseException:
            pair.kill()
            raise
    pair.pin(affinity)
    return pair


def _sketch_divergence(a: list[list[float]], b: list[list[float]]) -> float:
    flat_a = [x for row in a for x in row]
    flat_b = [x for row in b for x in row]
    return sum(abs(x - y) for x, y in zip(flat_a, flat_b)) / max(1, len(flat_a))


def _memory(worker: WorkerProcess, reply: dict[str, Any]) -> dict[str, float | None]:
    mem = reply.get("memory", {})
    return {"peak_rss_mb": worker.peak_rss_mb(), "gpu_nvml_mb": worker.gpu_memory_mb(),
            "peak_reserved_mb": mem.get("peak_reserved_mb"), "peak_allocated_mb": mem.get("peak_allocated_mb")}


def run_block(pair: Pair, index: int, prompts: tuple[str, ...], batch: int, rounds: int, warmup: int,
              rng: random.Random) -> Block:
    """Warm up both sides, then time `rounds` paired rounds in random order with fresh seeds."""
    def draw() -> list[tuple[str, int]]:
        return [(rng.choice(prompts), rng.randrange(2**31)) for _ in range(batch)]

    warm: dict[str, list[float]] = {"cand": [], "best": []}
    for _ in range(warmup):
        reqs = draw()
        for key, worker in (("cand", pair.cand), ("best", pair.best)):
            warm[key].append(worker.timed_request("generate", requests=[list(r) for r in reqs])[1])

    cand_s: list[float] = []
    best_s: list[float] = []
    seeds, orders, problems = [], [], []
    fingerprints: dict[str, dict[str, tuple]] = {"cand": {}, "best": {}}
    collisions: dict[str, list[tuple]] = {"cand": [], "best": []}
    divergences = []
    last: dict[str, dict] = {}
    for _ in range(rounds):
        reqs = draw()
        order = rng.choice(["cand", "best"])
        sequence = [order, "best" if order == "cand" else "cand"]
        replies: dict[str, dict] = {}
        for key in sequence:
            worker = pair.cand if key == "cand" else pair.best
            reply, seconds = worker.timed_request("generate", requests=[list(r) for r in reqs])
            if not reply["finite"]:
                raise CandidateCrash(f"{worker.side} produced NaN/Inf outputs during timing")
            (cand_s if key == "cand" else best_s).append(seconds)
            replies[key] = reply
        for key in ("cand", "best"):
            seen = fingerprints[key]
            for req, fp in zip(reqs, replies[key]["case_fingerprints"]):
                if fp in seen and seen[fp] != req:
                    collisions[key].append((seen[fp], req))
                seen[fp] = req
        divergences.append(_sketch_divergence(replies["cand"]["sketch"], replies["best"]["sketch"]))
        seeds.append([s for _, s in reqs])
        orders.append("".join(k[0].upper() for k in sequence))
        last = replies
    problems += [f"{key}: identical outputs for different requests in {len(pairs)} cases, e.g. {pairs[0][0]} and "
                 f"{pairs[0][1]}" for key, pairs in collisions.items() if pairs]
    divergence = max(divergences) if divergences else 0.0
    if divergence > MAX_SKETCH_DIVERGENCE:
        problems.append(f"timed outputs of candidate and best diverge (sketch difference {divergence:.3f} > "
                        f"{MAX_SKETCH_DIVERGENCE}): the timed work is not the judged work")
    memory = {"cand": _memory(pair.cand, last.get("cand", {})), "best": _memory(pair.best, last.get("best", {}))}
    return Block(index, cand_s, best_s, seeds, orders, warm, dict(pair.build_s), memory, divergence, problems)


@dataclass
class PerfOutcome:
    keep: bool
    reasons: list[str]
    blocks: list[Block]
    seconds: dict[str, float]
    guardrails: dict[str, Any]

    @property
    def final(self) -> BlockStats | None:
        return self.blocks[-1].stats if self.blocks else None

    def peak_memory_mb(self, side: str = "cand") -> float | None:
        return self.blocks[-1].peak_memory_mb(side) if self.blocks else None

    def as_dict(self) -> dict[str, Any]:
        return {"keep": self.keep, "reasons": self.reasons, "seconds": self.seconds,
                "guardrails": self.guardrails, "blocks": [b.as_dict() for b in self.blocks]}


def _guardrails(plan: MeasurementPlan, blocks: list[Block], last: bool) -> tuple[list[str], dict[str, Any]]:
    """Memory (every block) and tail latency (all blocks' samples, judged after the last block)."""
    peaks = {side: max((m for m in (b.peak_memory_mb(side) for b in blocks) if m is not None), default=None)
             for side in ("cand", "best")}
    g = plan.guardrails
    if plan.is_cuda:
        budget = g.peak_vram_gb * 1024.0 if g.peak_vram_gb else None
    else:
        budget = g.peak_memory_mb
    mem = guard.memory(peaks["cand"], peaks["best"], budget)
    tail = guard.tail_latency([s for b in blocks for s in b.cand_s], [s for b in blocks for s in b.best_s],
                              g.p95_regression_pct)
    problems = [mem.problem] if mem.problem else []
    if last and tail.problem:
        problems.append(tail.problem)
    return problems, {**mem.figures, **tail.figures}


def measure(plan: MeasurementPlan, launcher: WorkerLauncher, first_pair: Pair | None = None) -> PerfOutcome:
    """The whole performance verdict: block 1, then a confirming block (fresh workers) if block 1 wins."""
    p = plan.protocol
    rng = random.SystemRandom()
    blocks: list[Block] = []
    reasons: list[str] = []
    seconds = {"startup": 0.0, "warmup": 0.0, "samples": 0.0}
    guard_info: dict[str, Any] = {}
    pair: Pair | None = first_pair  # workers already booted (the quality run's candidate and a best)
    if pair is not None:
        pair.pin(p.cpu_affinity)
    try:
        for index in range(plan.max_blocks):
            if pair is None or (index > 0 and p.confirm_with_fresh_workers):
                if pair is not None:
                    pair.close()
                t0 = time.perf_counter()
                pair = start_pair(launcher, plan.cand, plan.best, plan.log_dir, f"block{index}", p.cpu_affinity)
                seconds["startup"] += time.perf_counter() - t0
            block = run_block(pair, index, plan.prompts, plan.batch, p.rounds, p.warmup_rounds, rng)
            seconds["warmup"] += sum(block.warmup_s["cand"]) + sum(block.warmup_s["best"])
            seconds["samples"] += sum(block.cand_s) + sum(block.best_s)
            block.stats = decide_block(block.cand_s, block.best_s, metric=plan.metric,
                                       min_improvement_pct=p.min_improvement_pct, alpha=p.alpha,
                                       resamples=p.bootstrap_resamples)
            blocks.append(block)
            guard_problems, guard_info = _guardrails(plan, blocks, last=index == plan.max_blocks - 1)
            problems = block.problems + guard_problems
            if plan.roofline_ms and block.stats.cand_median_ms < plan.roofline_ms:
                problems.append(f"candidate median {block.stats.cand_median_ms:.2f} ms is below the roofline "
                                f"floor {plan.roofline_ms:.2f} ms: the measurement cannot be right")
            if problems:
                reasons += [f"block {index + 1}: {msg}" for msg in problems]
                return PerfOutcome(False, reasons, blocks, seconds, guard_info)
            s = block.stats
            reasons.append(f"block {index + 1}: candidate {s.cand_median_ms:.2f} ms vs best {s.best_median_ms:.2f} ms, "
                           f"improvement {s.improvement_pct:+.2f}% (needs >= {p.min_improvement_pct}%), "
                           f"p={s.p_value:.2g}, median ratio CI upper {s.ci_upper_ratio:.4f}")
            if not s.passes:
                return PerfOutcome(False, reasons, blocks, seconds, guard_info)
        return PerfOutcome(True, reasons, blocks, seconds, guard_info)
    finally:
        if pair is not None:
            pair.close()

