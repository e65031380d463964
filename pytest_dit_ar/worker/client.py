"""Harness side of the worker protocol: start a worker for one side, send requests, time round trips.

`WorkerLauncher` is the one place a worker's command line, environment and limits are put together;
everything that needs a worker asks a launcher for one.
"""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dit_ar_contract.device import LaneTarget
from dit_ar_contract.errors import CandidateCrash

from . import protocol

HELLO_TIMEOUT_S = 300.0
HARNESS_ROOT = Path(__file__).resolve().parents[2]  # the folder holding dit_ar_contract/ and pytest_dit_ar/
PATH_VARIABLE = "DIT_AR_WORKER_PATH"
# The worker runs isolated (-I: no current folder, no PYTHONPATH, no user site on sys.path), so neither
# side can import harness code from its own tree; this prelude puts exactly the harness's folders first.
BOOTSTRAP = ("import os, sys; sys.path[:0] = os.environ.pop('" + PATH_VARIABLE + "').split(os.pathsep); "
             "from " + protocol.SERVER_MODULE + " import main; sys.exit(main())")


def worker_sys_path(root: Path) -> list[str]:
    """The harness folder, then the folders this process imports its libraries from, minus anything inside
    the side's tree (a best worktree holds an old copy of the harness) and the current folder."""
    inside = root.resolve()
    paths = [str(HARNESS_ROOT)]
    for entry in sys.path:
        if not entry or not Path(entry).is_dir():
            continue
        resolved = Path(entry).resolve()
        if resolved == HARNESS_ROOT or (resolved != inside and inside not in resolved.parents):
            paths.append(str(resolved))
    return list(dict.fromkeys(paths))


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class WorkerProcess:
    """One worker subprocess serving one side (candidate or best) of an experiment."""

    def __init__(self, side: str, root: Path, target: LaneTarget, threads: int, log_path: Path,
                 timeout_s: float = 600.0):
        self.side, self.root, self.target = side, root, target
        self.threads, self.log_path, self.timeout_s = threads, log_path, timeout_s
        self.proc: subprocess.Popen | None = None
        self.identity: dict[str, Any] = {}
        self.prelude_s = 0.0  # the worker's own start: imports, CUDA context (from its hello)
        self._buf = b""

    def start(self) -> "WorkerProcess":
        """Spawn and wait for the worker's hello."""
        return self.spawn().handshake()

    def spawn(self) -> "WorkerProcess":
        """Start the process. Call from the main thread: the child dies with the thread that spawned it."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        cmd = [sys.executable, "-I", "-c", BOOTSTRAP, "--root", str(self.root),
               "--device", self.target.device, "--threads", str(self.threads)]
        if self.target.memory_cap_gb:
            cmd += ["--cap-gb", str(self.target.memory_cap_gb)]
        env = {**os.environ, **self.target.env, "PYTHONUNBUFFERED": "1", "OMP_WAIT_POLICY": "PASSIVE",
               PATH_VARIABLE: os.pathsep.join(worker_sys_path(self.root))}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                     cwd=self.root, env=env, bufsize=0, preexec_fn=_die_with_parent)
        log.close()
        return self

    def handshake(self) -> "WorkerProcess":
        hello = self._read(HELLO_TIMEOUT_S)
        if not hello.get("ok"):
            raise CandidateCrash(f"{self.side} worker failed to start: {hello.get('error')}",
                                 hello.get("traceback", "") + log_tail(self.log_path))
        self.identity = hello["identity"]
        self.prelude_s = float(hello.get("prelude_s", 0.0))
        return self

    @property
    def device_name(self) -> str:
        """The device the worker says it runs on (display only: the worker is candidate code)."""
        return str(self.identity.get("name", "unknown device"))

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else -1

    def request(self, op: str, timeout_s: float | None = None, **fields: Any) -> dict[str, Any]:
        """Send one request and return the reply; a dead, hung or failing worker is a CandidateCrash."""
        reply, _ = self.timed_request(op, timeout_s, **fields)
        return reply

    def timed_request(self, op: str, timeout_s: float | None = None, **fields: Any) -> tuple[dict, float]:
        """Like request, and also the round-trip time in seconds measured with the harness's clock."""
        if self.proc is None or self.proc.poll() is not None:
            raise CandidateCrash(f"{self.side} worker is not running", log_tail(self.log_path))
        line = protocol.encode(protocol.request(op, **fields))
        start = time.perf_counter()
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise CandidateCrash(f"{self.side} worker died before {op}", log_tail(self.log_path)) from None
        reply = self._read(timeout_s or self.timeout_s)
        elapsed = time.perf_counter() - start
        if not reply.get("ok"):
            kind = reply.get("kind", "exception")
            raise CandidateCrash(f"{self.side} {op} failed ({kind}): {reply.get('error')}",
                                 reply.get("traceback", ""))
        return reply, elapsed

    def _read(self, timeout_s: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill()
                    raise CandidateCrash(f"{self.side} worker gave no answer within {timeout_s:.0f} s "
                                         "(killed)", log_tail(self.log_path))
                if not sel.select(timeout=min(left, 1.0)):
                    if self.proc.poll() is not None:
                        break
                    continue
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                self._buf += chunk
        if b"\n" not in self._buf:
            code = self.proc.wait(timeout=30)
            raise CandidateCrash(f"{self.side} worker died (exit code {code})", log_tail(self.log_path))
        line, self._buf = self._buf.split(b"\n", 1)
        return protocol.decode(line)

    def pin(self, cores: list[int] | None) -> None:
        """Pin every thread of the worker to `cores` (both sides of a pair share the same cores, so a
        per-core difference in speed cannot favour one side)."""
        if not cores or self.proc is None:
            return
        for tid in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                os.sched_setaffinity(int(tid.name), set(cores))
            except (OSError, ValueError):
                pass

    def peak_rss_mb(self) -> float | None:
        """Peak resident memory of the worker read by the harness from /proc (not reported by the worker)."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None

    def gpu_memory_mb(self) -> float | None:
        """Device memory of the worker's process as the driver sees it (NVML), if pynvml is present."""
        try:
            import pynvml  # type: ignore

            pynvml.nvmlInit()
            total = 0.0
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if p.pid == self.pid and p.usedGpuMemory:
                        total += p.usedGpuMemory / 2**20
            return total or None
        except Exception:  # NVML missing or unsupported here: fall back to the worker's own figure
            return None

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"op": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (BrokenPipeError, subprocess.TimeoutExpired, OSError):
                self.kill()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def __enter__(self) -> "WorkerProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


class WorkerLauncher:
    """Makes the workers of one lane: same device, environment, threads, memory cap and timeout."""

    def __init__(self, target: LaneTarget, threads: int, timeout_s: float):
        self.target, self.threads, self.timeout_s = target, threads, timeout_s

    def worker(self, side: str, root: Path, log_path: Path) -> WorkerProcess:
        """A worker for `side` running the model found under `root` (not started yet)."""
        return WorkerProcess(side, root, self.target, self.threads, log_path, self.timeout_s)
