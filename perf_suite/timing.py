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

from pytest_dit_ar.errors import CandidateCrash
from pytest_dit_ar.hardware import LaneTarget
from pytest_dit_ar.workers import WorkerProcess

from .stats import BlockStats, decide_block, p95

MAX_SKETCH_DIVERGENCE = 0.2  # mean |difference| of 4x4-pooled images in [0, 1] between the two sides
MIN_SAMPLES_FOR_P95 = 20  # fewer samples make a p95 the maximum, which one burst of noise decides


@dataclass
class SideSpec:
    name: str
    root: Path
    spec: dict[str, Any]


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


@dataclass
class Pair:
    cand: WorkerProcess
    best: WorkerProcess
    build_s: dict[str, float] = field(default_factory=dict)

    def close(self) -> None:
        self.cand.close()
        self.best.close()


def start_pair(cand: SideSpec, best: SideSpec, target: LaneTarget, threads: int, log_dir: Path,
               tag: str, timeout_s: float, affinity: list[int] | None = None) -> Pair:
    """Start and build both workers in parallel; a failure on either side is a CandidateCrash."""
    workers = {
        "cand": WorkerProcess("candidate", cand.root, target, threads, log_dir / f"worker-candidate-{tag}.log", timeout_s),
        "best": WorkerProcess("best", best.root, target, threads, log_dir / f"worker-best-{tag}.log", timeout_s),
    }
    specs = {"cand": cand.spec, "best": best.spec}

    for w in workers.values():
        w.spawn()

    def boot(key: str) -> float:
        workers[key].handshake()
        return workers[key].request("build", spec=specs[key])["build_s"]

    with ThreadPoolExecutor(2) as pool:
        futures = {k: pool.submit(boot, k) for k in workers}
        try:
            build_s = {k: f.result() for k, f in futures.items()}
        except BaseException:
            for w in workers.values():
                w.kill()
            raise
    for w in workers.values():
        w.pin(affinity)
    return Pair(workers["cand"], workers["best"], build_s)


def _sketch_divergence(a: list[list[float]], b: list[list[float]]) -> float:
    flat_a = [x for row in a for x in row]
    flat_b = [x for row in b for x in row]
    return sum(abs(x - y) for x, y in zip(flat_a, flat_b)) / max(1, len(flat_a))


def _memory(worker: WorkerProcess, reply: dict[str, Any]) -> dict[str, float | None]:
    mem = reply.get("memory", {})
    return {"peak_rss_mb": worker.peak_rss_mb(), "gpu_nvml_mb": worker.gpu_memory_mb(),
            "peak_reserved_mb": mem.get("peak_reserved_mb"), "peak_allocated_mb": mem.get("peak_allocated_mb")}


def run_block(pair: Pair, index: int, prompts: list[str], batch: int, rounds: int, warmup: int,
              rng: random.Random) -> Block:
    """Warm up both sides, then time `rounds` paired rounds in random order with fresh seeds."""
    def draw() -> list[tuple[str, int]]:
        return [(rng.choice(prompts), rng.randrange(2**31)) for _ in range(batch)]

    warm: dict[str, list[float]] = {"cand": [], "best": []}
    for _ in range(warmup):
        reqs = draw()
        for key, worker in (("cand", pair.cand), ("best", pair.best)):
            warm[key].append(worker.timed_request("generate", requests=[list(r) for r in reqs])[1])

    cand_s, best_s, seeds, orders, problems = [], [], [], [], []
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

    def as_dict(self) -> dict[str, Any]:
        return {"keep": self.keep, "reasons": self.reasons, "seconds": self.seconds,
                "guardrails": self.guardrails, "blocks": [b.as_dict() for b in self.blocks]}


def peak_memory_mb(block: Block, side: str) -> float | None:
    """The side's peak memory as trusted by the harness: device memory on GPUs, resident set on CPUs."""
    mem = block.memory[side]
    gpu = [v for v in (mem.get("gpu_nvml_mb"), mem.get("peak_reserved_mb")) if v]
    if gpu:
        return max(gpu)
    return mem.get("peak_rss_mb")


def memory_problems(blocks: list[Block], lane_guardrails: dict[str, float], is_cuda: bool) -> tuple[list[str], dict]:
    """The candidate's peak memory (worst block) against the lane's budget."""
    peak = max((m for m in (peak_memory_mb(b, "cand") for b in blocks) if m is not None), default=None)
    best = max((m for m in (peak_memory_mb(b, "best") for b in blocks) if m is not None), default=None)
    info: dict[str, Any] = {"cand_peak_mb": peak, "best_peak_mb": best}
    key, scale = ("peak_vram_gb", 1024.0) if is_cuda else ("peak_memory_mb", 1.0)
    if key in lane_guardrails and peak is not None and peak > lane_guardrails[key] * scale:
        return [f"peak memory {peak:.0f} MB exceeds the budget {lane_guardrails[key] * scale:.0f} MB"], info
    return [], info


def p95_problems(blocks: list[Block], lane_guardrails: dict[str, float]) -> tuple[list[str], dict]:
    """The candidate's p95 latency over all blocks' samples against the best's plus a tolerance."""
    tol = lane_guardrails.get("p95_regression_pct")
    cand = [s for b in blocks for s in b.cand_s]
    best = [s for b in blocks for s in b.best_s]
    if tol is None:
        return [], {}
    if len(cand) < MIN_SAMPLES_FOR_P95:
        return [], {"p95": f"not judged: {len(cand)} samples < {MIN_SAMPLES_FOR_P95} (a p95 of fewer is the maximum)"}
    cand_p95, best_p95 = p95(cand) * 1e3, p95(best) * 1e3
    limit = best_p95 * (1 + tol / 100)
    info = {"cand_p95_ms": cand_p95, "best_p95_ms": best_p95, "p95_limit_ms": limit}
    if cand_p95 > limit:
        return [f"p95 {cand_p95:.1f} ms regressed beyond {limit:.1f} ms (best p95 {best_p95:.1f} ms + {tol:g}%)"], info
    return [], info


def measure(cand: SideSpec, best: SideSpec, target: LaneTarget, perf: dict[str, Any], prompts: list[str],
            batch: int, metric: str, guardrails: dict[str, float], is_cuda: bool, log_dir: Path,
            roofline_ms: float | None = None, max_blocks: int = 2, first_pair: Pair | None = None) -> PerfOutcome:
    """The whole performance verdict: block 1, then a confirming block (fresh workers) if block 1 wins."""
    rng = random.SystemRandom()
    blocks: list[Block] = []
    reasons: list[str] = []
    seconds = {"startup": 0.0, "warmup": 0.0, "samples": 0.0}
    guard_info: dict[str, Any] = {}
    pair: Pair | None = first_pair  # workers already booted (the quality run's candidate and a best)
    if pair is not None:
        pair.cand.pin(perf.get("cpu_affinity"))
        pair.best.pin(perf.get("cpu_affinity"))
    try:
        for index in range(max_blocks):
            if pair is None or (index > 0 and perf["confirm_with_fresh_workers"]):
                if pair is not None:
                    pair.close()
                t0 = time.perf_counter()
                pair = start_pair(cand, best, target, int(perf["threads"]), log_dir, f"block{index}",
                                  float(perf["round_timeout_s"]), perf.get("cpu_affinity"))
                seconds["startup"] += time.perf_counter() - t0
            block = run_block(pair, index, prompts, batch, int(perf["rounds"]), int(perf["warmup_rounds"]), rng)
            seconds["warmup"] += sum(block.warmup_s["cand"]) + sum(block.warmup_s["best"])
            seconds["samples"] += sum(block.cand_s) + sum(block.best_s)
            block.stats = decide_block(block.cand_s, block.best_s, metric=metric,
                                       min_improvement_pct=float(perf["min_improvement_pct"]),
                                       alpha=float(perf["alpha"]), resamples=int(perf["bootstrap_resamples"]))
            blocks.append(block)
            memory, guard_info = memory_problems(blocks, guardrails, is_cuda)
            tail, tail_info = p95_problems(blocks, guardrails)
            guard_info.update(tail_info)
            problems = block.problems + memory + (tail if index == max_blocks - 1 else [])
            if roofline_ms and block.stats.cand_median_ms < roofline_ms:
                problems.append(f"candidate median {block.stats.cand_median_ms:.2f} ms is below the roofline "
                                f"floor {roofline_ms:.2f} ms: the measurement cannot be right")
            if problems:
                reasons += [f"block {index + 1}: {p}" for p in problems]
                return PerfOutcome(False, reasons, blocks, seconds, guard_info)
            s = block.stats
            summary = (f"block {index + 1}: candidate {s.cand_median_ms:.2f} ms vs best {s.best_median_ms:.2f} ms, "
                       f"improvement {s.improvement_pct:+.2f}% (needs >= {perf['min_improvement_pct']}%), "
                       f"p={s.p_value:.2g}, median ratio CI upper {s.ci_upper_ratio:.4f}")
            reasons.append(summary)
            if not s.passes:
                return PerfOutcome(False, reasons, blocks, seconds, guard_info)
        return PerfOutcome(True, reasons, blocks, seconds, guard_info)
    finally:
        if pair is not None:
            pair.close()

