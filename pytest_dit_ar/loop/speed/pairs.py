"""The worker pairs a performance verdict times: a pair of workers (`Pair`), starting and building them, where
later pairs come from (`PairSource`: the fork servers, else fresh exec'd workers, built outside timed rounds)
and the cores a timed pair runs on."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dit_ar_contract.config import PerfProtocol
from dit_ar_contract.sides import ROLES, Role, Sides

from ...state.perf_record import SegmentRecord
from ...state.runs import RunPaths
from ...worker.client import WorkerLauncher, WorkerProcess
from ...worker.forkserver import ForkedWorker, ForkServers
from . import clean_rounds
from .clean_rounds import GpuWatch, NoGpu
from .measurement_plan import MeasurementPlan, Side
from .pool import PoolPlan, pairs_that_fit

SIDE_NAMES = {role.key: role.label for role in ROLES}  # a side's record key -> its workers' and logs' name


@dataclass
class Pair:
    """The two workers of one segment, with their build times (the harness's clock)."""

    cand: WorkerProcess
    best: WorkerProcess
    build_s: Sides[float] = field(default_factory=lambda: Sides(0.0, 0.0))
    fresh: bool = True  # False: the candidate already generated the corpus (its warm-up is not a first use)
    history: Sides[list[float]] = field(default_factory=lambda: Sides([], []))  # generates before the warm-up
    # (the harness's clock) that the warm-up rule reads with its own rounds (perf_suite.warmup.state_after)

    @property
    def workers(self) -> Sides[WorkerProcess]:
        return Sides(self.cand, self.best)

    @property
    def forked(self) -> bool:
        return isinstance(self.cand, ForkedWorker) and isinstance(self.best, ForkedWorker)

    def ready_s(self) -> Sides[float | None]:
        """Forked workers' fork-to-hello times (the harness's clock); None for an exec'd worker."""
        return self.workers.map(lambda w: w.ready_s if isinstance(w, ForkedWorker) else None)

    def worker(self, role: Role) -> WorkerProcess:
        return self.workers[role]

    def freeze(self) -> None:
        self.cand.freeze()
        self.best.freeze()

    def pin(self, cores: tuple[int, ...] | None) -> None:
        self.cand.pin(cores)
        self.best.pin(cores)

    def close(self) -> None:
        """Both sides at once: each worker's exit (a GPU worker's context teardown takes a second or more) runs
        beside the other's."""
        with ThreadPoolExecutor(2) as pool:
            done = [pool.submit(w.close) for w in (self.cand, self.best)]
        for future in done:
            future.result()

    def kill(self) -> None:
        self.cand.kill()
        self.best.kill()


def boot(worker: WorkerProcess, spec: dict[str, Any], cores: tuple[int, ...] | None = None) -> float:
    """Wait for a spawned worker's hello and build its pipeline; returns the build time in seconds as the
    harness's clock saw it (the worker's own figure is not trusted). With `cores` the worker is pinned to them
    before `build` imports the side's code, so the candidate starts on the timed cores."""
    worker.handshake()
    worker.pin(list(cores) if cores else None)
    t0 = time.perf_counter()
    worker.request("build", spec=spec)
    return time.perf_counter() - t0


def spawn_pair(launcher: WorkerLauncher, cand: Side, best: Side, log_dir: Path, tag: str,
               best_launcher: WorkerLauncher | None = None) -> Pair:
    """Start both workers; they run only the fixed prelude (imports, device) until they are built. The best
    side may come from another launcher (the study's sandbox-overhead arm: the same tree unsandboxed)."""
    logs = RunPaths(log_dir)
    cand_name, best_name = Role.CANDIDATE.label, Role.BEST.label
    return Pair(launcher.worker(cand_name, cand.root, logs.worker_log(cand_name, tag)).spawn(),
                (best_launcher or launcher).worker(best_name, best.root, logs.worker_log(best_name, tag)).spawn())


def build_pair(pair: Pair, cand: Side, best: Side, affinity: tuple[int, ...] | None = None) -> Pair:
    """Build both sides' pipelines in parallel; a failure on either side is a CandidateCrash."""
    with ThreadPoolExecutor(2) as pool:
        futures = Sides(pool.submit(boot, pair.cand, cand.spec, affinity),
                        pool.submit(boot, pair.best, best.spec, affinity))
        try:
            pair.build_s = futures.map(lambda f: f.result())
        except BaseException:
            pair.kill()
            raise
    pair.pin(affinity)
    return pair


def start_pair(launcher: WorkerLauncher, cand: Side, best: Side, log_dir: Path, tag: str,
               affinity: tuple[int, ...] | None = None) -> Pair:
    """Start and build a fresh pair."""
    return build_pair(spawn_pair(launcher, cand, best, log_dir, tag), cand, best, affinity)


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


def warm_cores(timed: tuple[int, ...] | None, is_cuda: bool) -> Sides[tuple[int, ...]] | None:
    """Cores of its own for each side's first warm-up generate (GPU lanes with two spare cores or more: the
    spare cores split in halves), or None (the sides take turns from the first generate on)."""
    spare = spare_cores(timed) if is_cuda else None
    if not spare or len(spare) < 2:
        return None
    half = len(spare) // 2
    return Sides(spare[:half], spare[half:])


def gpu_watch(pair: Pair, is_cuda: bool) -> GpuWatch:
    """NVML readings of the GPUs the pair's workers use (after their build), or none on CPU lanes."""
    if not is_cuda:
        return NoGpu()
    uuids = sorted({*pair.cand.gpu_memory_per_device_mb(), *pair.best.gpu_memory_per_device_mb()})
    return clean_rounds.NvmlWatch(uuids) if uuids else NoGpu()


class PairSource:
    """Where the pairs come from: the fork servers (after the quality run's pair), else fresh exec'd
    pairs; built outside timed rounds (one at a time for segments, all of them for concurrent pairs), the
    ones waiting frozen. `pool` is the memory plan (loop/speed/pool.py) from the first pair's measured peaks."""

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
            budget = available_mb()
        self.pool = pairs_that_fit(seg.peak_memory_mb(Role.CANDIDATE), seg.peak_memory_mb(Role.BEST), budget, most)

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
                for role in ROLES:
                    self.forks.side(role).note_ready(p.worker(role))  # type: ignore[arg-type]
        return pairs

    def spawn_ahead(self, index: int) -> None:
        """Exec'd pairs only: start the next pair's prelude during this segment, pinned to cores no timed
        worker uses; without spare cores nothing starts during timed rounds."""
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


def available_mb() -> float | None:
    """The host's available memory (MemAvailable), None when /proc does not say."""
    try:
        for line in open("/proc/meminfo", encoding="ascii"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None
