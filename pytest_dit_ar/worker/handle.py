"""The processes of one worker serving one side (candidate or best): started by worker/spawn.py, frozen between
requests by worker/freezer.py, their memory sampled by worker/memory.py, pinned and killed here. The protocol
over them is worker/client.py's `WorkerProcess`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dit_ar_contract.device import LaneTarget

from . import cgroup
from . import sandbox as sandbox_mod
from .bootstrap import PATH_VARIABLE, worker_sys_path
from .compile_cache import CompileCaches
from .freezer import Freezer
from .memory import MemoryWatch
from .processes import AffinityWatch, pin_threads, running


@dataclass(frozen=True)
class SandboxPolicy:
    """How workers are sandboxed (worker/sandbox.py): the host paths every sandbox hides, and GPU access."""

    hide: tuple[Path, ...] = ()
    gpu: bool = False
    expose: tuple[Path, ...] = ()  # the project's folder (its fixed weights), besides the harness's
    mutable: tuple[str, ...] = ("model_under_test/",)  # what a side's sandbox shows of its tree
    memory_max_mb: float | None = None  # each worker's hard host-memory limit (worker/host_limit.py; None: none)


class WorkerHandle:
    """The processes of one worker serving one side (candidate or best): started, frozen, sampled, killed."""

    def __init__(self, side: str, root: Path, target: LaneTarget, threads: int, log_path: Path,
                 timeout_s: float = 600.0, sandbox: SandboxPolicy | None = None,
                 caches: CompileCaches | None = None, mutable: tuple[str, ...] = ("model_under_test/",)):
        self.side, self.root, self.target = side, root, target
        self.threads, self.log_path, self.timeout_s = threads, log_path, timeout_s
        self.sandbox = sandbox
        self.caches, self.mutable = caches, (sandbox.mutable if sandbox else mutable)
        self.cache_digest: str | None = None  # the tree's compile cache (set at spawn)
        self.cache_warm: bool | None = None  # an earlier worker of the same tree filled the cache (None: no caches)
        self.cache_source: Path | None = None  # the tree's own folder, when this worker got a throwaway copy
        self.fills_cache_late = False  # a fork server: its copy is filled before its first fork (spawn.py)
        self.stages_tree_late = False  # a warm fork server: its tree is staged when an experiment adopts it
        # outputs land in the scratch folder (host side); a sandboxed worker's is a fresh temporary folder with a
        # random name outside the project (its bind source shows in /proc/self/mountinfo), removed with the worker
        self.stage: Path | None = None
        self.scratch = log_path.with_name(log_path.stem + "-scratch")
        self.proc: subprocess.Popen | None = None
        self.namespace: sandbox_mod.Namespace | None = None
        self.group: cgroup.Group | None = None
        self.freezer = Freezer(self)  # stopped between requests (worker/freezer.py)
        self.memory = MemoryWatch(self)  # sampled by the harness while it lives (worker/memory.py)

    @property
    def model_root(self) -> Path:
        """Where the worker sees its side's tree (the same path for both sides when sandboxed)."""
        return sandbox_mod.MOUNT if self.sandbox else self.root

    def _inside(self, name: str) -> str:
        return str((sandbox_mod.SCRATCH if self.sandbox else self.scratch) / name)

    def argv(self, bootstrap: str) -> list[str]:
        """The command line of a worker (or of a fork server, with its own bootstrap) for this side."""
        # -B: no __pycache__ written into the side's tree (-I ignores PYTHONDONTWRITEBYTECODE)
        argv = [sys.executable, "-I", "-B", "-c", bootstrap, "--root", str(self.model_root),
                "--device", self.target.device, "--threads", str(self.threads)]
        if self.target.memory_cap_gb:
            argv += ["--cap-gb", str(self.target.memory_cap_gb)]
        return argv

    def environment(self) -> dict[str, str]:
        """The variables a worker gets on top of the lane's (the same for both sides)."""
        return {**self.target.env, "PYTHONUNBUFFERED": "1", "OMP_WAIT_POLICY": "PASSIVE",
                PATH_VARIABLE: os.pathsep.join(worker_sys_path(self.root))}

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else -1

    def processes(self) -> list[int]:
        """Host PIDs of everything the worker runs: its whole sandbox (zombies left out: they run nothing), or
        just its process."""
        if self.namespace is not None:
            return running(self.namespace.pids())
        return [self.pid] if self.proc is not None and self.proc.poll() is None else []

    def helpers(self) -> list[int]:
        """What else runs beside the worker: its processes less the worker's own (an exec'd worker's sandbox
        init and the worker under it; a forked worker's process). Host PIDs the harness reads itself."""
        running = self.processes()
        own = {self.pid} | (self.namespace.own_pids(running) if self.namespace is not None else set())
        return [p for p in running if p not in own]

    @property
    def frozen(self) -> bool:
        return self.freezer.frozen

    @frozen.setter
    def frozen(self, value: bool) -> None:
        self.freezer.frozen = value

    @property
    def freeze_waits(self) -> list[float]:
        return self.freezer.waits

    def freeze(self) -> None:
        """Stop every process of this side and wait until none has work left (worker/freezer.py)."""
        self.freezer.freeze()

    def thaw(self) -> None:
        self.freezer.thaw()

    def pin(self, cores: list[int] | None) -> None:
        """Pin every thread of the worker to `cores` (both sides of a pair share the same cores, so a
        per-core difference in speed cannot favour one side)."""
        if cores:
            pin_threads(self.processes(), cores)

    def affinity_watch(self, cores: list[int]) -> AffinityWatch:
        """A watch on the worker's threads' affinity against `cores` (worker/processes.py), for one timed round."""
        return AffinityWatch(self.processes, cores)

    def peak_host_mb(self) -> float | None:
        """Peak host memory of everything the worker runs, sampled by the harness (worker/memory.py)."""
        return self.memory.peak_host_mb()

    def mark_steady(self) -> None:
        """Warm-up is over: the harness's samplers keep the steady peak from now on (worker/memory.py)."""
        self.memory.mark_steady()

    def steady_host_mb(self) -> float | None:
        return self.memory.steady_host_mb()

    def steady_gpu_mb(self) -> float | None:
        return self.memory.steady_gpu_mb()

    def kernel_peak_mb(self) -> float | None:
        """The cgroup's own high-water mark (page cache included), for reference."""
        return self.group.kernel_peak_mb() if self.group is not None else None

    def gpu_memory_mb(self) -> float | None:
        """Device memory of the worker's processes on its fullest GPU (NVML; worker/memory.py)."""
        return self.memory.gpu_mb()

    def gpu_memory_per_device_mb(self) -> dict[str, float]:
        """Device memory of the worker's processes per GPU UUID (NVML)."""
        return self.memory.gpu_per_device_mb()

    def kill(self) -> None:
        """Kill every process of the worker (its sandbox, its cgroup), then remove what it could write."""
        if self.namespace is not None:
            self.namespace.kill()
        if self.group is not None:
            self.group.remove()  # kills what is left, thaws (a v1-frozen task dies only once thawed)
        elif self.frozen and self.namespace is None and self.proc is not None:
            self.thaw()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        self.freezer.frozen = False
        self._wait_gone()
        self.memory.stop()
        self.group = None
        if self.stage is not None:
            shutil.rmtree(self.stage, ignore_errors=True)
            self.stage = None

    def _wait_gone(self, timeout_s: float = 10.0) -> None:
        """Wait (bounded) until no process of the sandbox is left: SIGKILL takes effect asynchronously."""
        if self.namespace is None:
            return
        deadline = time.monotonic() + timeout_s
        while running(self.namespace.pids()) and time.monotonic() < deadline:
            self.namespace.kill()
            time.sleep(0.02)
