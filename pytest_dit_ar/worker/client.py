"""Harness side of the worker protocol: start a worker for one side, send requests, time round trips.

`WorkerLauncher` is the one place a worker's command line, environment and limits are put together;
everything that needs a worker asks a launcher for one. A worker is two layers: `WorkerHandle`
(worker/handle.py), the processes of one side, and `WorkerProcess`, the protocol over them (the hello, timed
requests read by worker/channel.py, outputs the harness reads and checks itself by worker/outputs.py).
"""

from __future__ import annotations

import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dit_ar_contract.device import LaneTarget
from dit_ar_contract.errors import CandidateCrash

from . import cgroup, protocol, spawn
from . import sandbox as sandbox_mod
from .bootstrap import BOOTSTRAP, PATH_VARIABLE
from .channel import Replies
from .compile_cache import CompileCaches, tree_digest
from .handle import SandboxPolicy, WorkerHandle
from .outputs import folder_bytes, load_outputs, log_tail, number, parse_outputs, read_output

__all__ = ["PATH_VARIABLE", "Generated", "SandboxPolicy", "WorkerHandle", "WorkerLauncher", "WorkerProcess",
           "folder_bytes", "log_tail", "parse_outputs", "read_output"]

HELLO_TIMEOUT_S = 300.0
SCRATCH_LIMIT_MB = 4096  # what a worker may leave in its scratch folder (outputs, caches); more is a crash


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
        spawn.launch(self, self.argv(BOOTSTRAP), subprocess.PIPE, subprocess.PIPE)
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
            raise CandidateCrash(f"{self.side} worker is not running{self._died()}", log_tail(self.log_path))
        line = protocol.encode(protocol.request(op, **fields))
        self.thaw()
        start = time.perf_counter()
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise CandidateCrash(f"{self.side} worker died before {op}{self._died()}", log_tail(self.log_path)) \
                from None
        reply = self.replies.read(timeout_s or self.timeout_s)
        elapsed = time.perf_counter() - start
        self.freeze()
        if not reply.get("ok"):
            kind = reply.get("kind", "exception")
            raise CandidateCrash(f"{self.side} {op} failed ({kind}): {reply.get('error')}",
                                 str(reply.get("traceback", "")))
        self._check_scratch()
        return reply, elapsed

    def _died(self) -> str:
        note = cgroup.oom_note(self.group)  # the kernel killed it at its memory limit: says so
        return f" ({note})" if note else ""

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
