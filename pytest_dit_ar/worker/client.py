"""Harness side of the worker protocol: start a worker for one side, send requests, time round trips.

`WorkerLauncher` is the one place a worker's command line, environment and limits are put together;
everything that needs a worker asks a launcher for one. A worker is two layers: `WorkerHandle`, the processes
of one side (started by worker/spawn.py, frozen between requests by worker/freezer.py, their memory sampled by
worker/memory.py, pinned and killed here), and `WorkerProcess`, the protocol over them (the hello, timed
requests read by worker/channel.py, outputs the harness reads and checks itself by worker/outputs.py).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dit_ar_contract.device import LaneTarget
from dit_ar_contract.errors import CandidateCrash

from . import cgroup, protocol, spawn
from . import sandbox as sandbox_mod
from .channel import Replies
from .compile_cache import CompileCaches, tree_digest
from .freezer import Freezer
from .memory import MemoryWatch
from .outputs import folder_bytes, load_outputs, log_tail, number, parse_outputs, read_output
from .spawn import BOOTSTRAP, PATH_VARIABLE, worker_sys_path

__all__ = ["PATH_VARIABLE", "Generated", "SandboxPolicy", "WorkerHandle", "WorkerLauncher", "WorkerProcess",
           "folder_bytes", "log_tail", "parse_outputs", "read_output"]

HELLO_TIMEOUT_S = 300.0
SCRATCH_LIMIT_MB = 4096  # what a worker may leave in its scratch folder (outputs, caches); more is a crash


@dataclass(frozen=True)
class SandboxPolicy:
    """How workers are sandboxed (worker/sandbox.py): the host paths every sandbox hides, and GPU access."""

    hide: tuple[Path, ...] = ()
    gpu: bool = False
    expose: tuple[Path, ...] = ()  # the project's folder (its fixed weights), besides the harness's
    mutable: tuple[str, ...] = ("model_under_test/",)  # what a side's sandbox shows of its tree


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
        # outputs land in the scratch folder (host side); a sandboxed worker's is a fresh temporary folder
        # with a random name outside the project (its bind source shows in /proc/self/mountinfo), removed with
        # the worker: nothing it writes survives it
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

    def _launch(self, argv: list[str], stdin: Any, stdout: Any) -> None:
        """Popen `argv` for this side (worker/spawn.py: sandbox, cgroup, seccomp, memory sampling)."""
        spawn.launch(self, argv, stdin, stdout)

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else -1

    def processes(self) -> list[int]:
        """Host PIDs of everything the worker runs: its whole sandbox (zombies left out: they run nothing), or
        just its process."""
        if self.namespace is not None:
            return self._running(self.namespace.pids())
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
        if not cores:
            return
        for pid in self.processes():
            try:
                tasks = list(Path(f"/proc/{pid}/task").iterdir())
            except OSError:
                continue
            for tid in tasks:
                try:
                    os.sched_setaffinity(int(tid.name), set(cores))
                except (OSError, ValueError):
                    pass

    def peak_host_mb(self) -> float | None:
        """Peak host memory of everything the worker runs, sampled by the harness (worker/memory.py)."""
        return self.memory.peak_host_mb()

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
        if self.group is not None:
            self.group = None
        if self.stage is not None:
            shutil.rmtree(self.stage, ignore_errors=True)
            self.stage = None

    def _wait_gone(self, timeout_s: float = 10.0) -> None:
        """Wait (bounded) until no process of the sandbox is left: SIGKILL takes effect asynchronously."""
        if self.namespace is None:
            return
        deadline = time.monotonic() + timeout_s
        while self._running(self.namespace.pids()) and time.monotonic() < deadline:
            self.namespace.kill()
            time.sleep(0.02)

    @staticmethod
    def _running(pids: list[int]) -> list[int]:
        """The processes of `pids` that are not zombies: a zombie has exited, its memory, descriptors and GPU
        context are released, and only its parent's wait is missing (the sandbox's init after a graceful
        exit stayed a zombie for 1.3-2 s on the 2-core VM, which every close used to wait for)."""
        states = cgroup.task_states(pids)
        return [p for p in pids if states.get(p, "Z") not in ("Z", "X")]


@dataclass
class Generated:
    """One generate round trip: its time by the harness's clock and the outputs the harness read itself."""

    seconds: float
    images: Any  # torch.Tensor [N, 3, H, W], float32, CPU
    latents: Any  # torch.Tensor [N, C, h, w]
    rows_per_image: float | None
    memory: dict[str, float]


class WorkerProcess(WorkerHandle):
    """One worker subprocess serving one side of an experiment: the protocol over its processes."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.identity: dict[str, Any] = {}
        self.prelude_s = 0.0  # the worker's own start: imports, CUDA context (from its hello)
        self.replies = Replies(self)
        self._outputs = 0
        self._token = secrets.token_hex(4)  # output names of workers sharing one scratch folder stay apart

    def start(self) -> "WorkerProcess":
        """Spawn and wait for the worker's hello."""
        return self.spawn().handshake()

    def spawn(self) -> "WorkerProcess":
        """Start the process. Call from the main thread: the child dies with the thread that spawned it."""
        self._launch(self.argv(BOOTSTRAP), subprocess.PIPE, subprocess.PIPE)
        return self

    def handshake(self) -> "WorkerProcess":
        hello = self.replies.read(HELLO_TIMEOUT_S)
        if not hello.get("ok"):
            raise CandidateCrash(f"{self.side} worker failed to start: {hello.get('error')}",
                                 str(hello.get("traceback", "")) + log_tail(self.log_path))
        identity = hello.get("identity")
        if not isinstance(identity, dict):
            raise CandidateCrash(f"{self.side} worker's hello carries no identity", log_tail(self.log_path))
        self.identity = identity
        self.prelude_s = number(hello.get("prelude_s")) or 0.0
        self.freeze()  # frozen between requests in every phase: the quality run looks like the timed rounds
        return self

    @property
    def device_name(self) -> str:
        """The device the worker says it runs on (display only: the worker is candidate code)."""
        return str(self.identity.get("name", "unknown device"))

    def note_start(self, seconds: float) -> None:
        """Record this worker's start-up (build + warm-up) in its tree's record, as cold or warm."""
        if self.caches is not None and self.cache_digest is not None:
            self.caches.note_start(self.cache_digest, seconds, bool(self.cache_warm))

    def note_peak(self, peak_mb: float | None) -> None:
        """Record the device memory this worker was seen to use in its tree's record (the memory plan reads it)."""
        if self.caches is not None and self.cache_digest is not None:
            self.caches.note_peak(self.cache_digest, peak_mb)

    def request(self, op: str, timeout_s: float | None = None, **fields: Any) -> dict[str, Any]:
        """Send one request and return the reply; a dead, hung or failing worker is a CandidateCrash."""
        reply, _ = self.timed_request(op, timeout_s, **fields)
        return reply

    def generate(self, requests: list[list[Any]], perturb: dict[str, Any] | None = None,
                 resolution: int | None = None) -> Generated:
        """One timed generate. The worker writes its outputs to its scratch folder; the harness reads and
        checks them itself (shape, resolution, finite values): nothing the worker reports about them counts."""
        self._outputs += 1
        name = f"out-{self._token}-{self._outputs}.safetensors"
        fields: dict[str, Any] = {"requests": requests, "out": self._inside(name)}
        if perturb:
            fields["perturb"] = perturb
        reply, seconds = self.timed_request("generate", **fields)
        images, latents = load_outputs(self.scratch / name, len(requests), resolution, self.side,
                                       self.log_path)
        memory = reply.get("memory")
        memory = {str(k): v for k, v in memory.items() if number(v) is not None} if isinstance(memory, dict) else {}
        return Generated(seconds, images, latents, number(reply.get("denoiser_rows_per_image")), memory)

    def timed_request(self, op: str, timeout_s: float | None = None, **fields: Any) -> tuple[dict, float]:
        """Like request, and also the round-trip time in seconds measured with the harness's clock."""
        if self.proc is None or self.proc.poll() is not None:
            raise CandidateCrash(f"{self.side} worker is not running", log_tail(self.log_path))
        line = protocol.encode(protocol.request(op, **fields))
        self.thaw()
        start = time.perf_counter()
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise CandidateCrash(f"{self.side} worker died before {op}", log_tail(self.log_path)) from None
        reply = self.replies.read(timeout_s or self.timeout_s)
        elapsed = time.perf_counter() - start
        self.freeze()
        if not reply.get("ok"):
            kind = reply.get("kind", "exception")
            raise CandidateCrash(f"{self.side} {op} failed ({kind}): {reply.get('error')}",
                                 str(reply.get("traceback", "")))
        self._check_scratch()
        return reply, elapsed

    def _check_scratch(self) -> None:
        """A worker may keep at most SCRATCH_LIMIT_MB in its scratch folder (the only host folder it can write)."""
        limit = SCRATCH_LIMIT_MB << 20
        used = folder_bytes(self.scratch, limit)
        if used > limit:
            self.kill()
            raise CandidateCrash(f"{self.side} filled its scratch folder past {SCRATCH_LIMIT_MB} MiB (killed)",
                                 log_tail(self.log_path))

    def close(self) -> None:
        if self.proc is None:
            return
        self.thaw()  # a frozen worker cannot read its exit request
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(protocol.encode(protocol.request("exit")))
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (BrokenPipeError, subprocess.TimeoutExpired, OSError):
                pass
        self.kill()  # whatever it started dies with it, frozen or not
        self.proc = None

    def __enter__(self) -> "WorkerProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


class WorkerLauncher:
    """Makes the workers of one lane: same device, environment, threads, memory cap, timeout and sandbox."""

    def __init__(self, target: LaneTarget, threads: int, timeout_s: float, sandbox: SandboxPolicy | None = None,
                 caches: CompileCaches | None = None, mutable: tuple[str, ...] = ("model_under_test/",)):
        self.target, self.threads, self.timeout_s, self.sandbox = target, threads, timeout_s, sandbox
        self.caches, self.mutable = caches, mutable  # compile caches per tree (None: each worker's own scratch)

    def worker(self, side: str, root: Path, log_path: Path) -> WorkerProcess:
        """A worker for `side` running the model found under `root` (not started yet)."""
        return WorkerProcess(side, root, self.target, self.threads, log_path, self.timeout_s, self.sandbox,
                             self.caches, self.mutable)

    def tree_digest(self, root: Path) -> str:
        """The compile-cache key of the tree at `root` (what its workers' cache folder is named by)."""
        return tree_digest(root, self.sandbox.mutable if self.sandbox else self.mutable)

    def model_root(self, root: Path) -> Path:
        """The path a worker of this launcher sees `root` at (what the workload's spec must name)."""
        return sandbox_mod.MOUNT if self.sandbox else root
