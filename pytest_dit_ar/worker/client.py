"""Harness side of the worker protocol: start a worker for one side, send requests, time round trips.

`WorkerLauncher` is the one place a worker's command line, environment and limits are put together;
everything that needs a worker asks a launcher for one.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dit_ar_contract.device import LaneTarget
from dit_ar_contract.errors import CandidateCrash, Refused

from . import protocol
from . import sandbox as sandbox_mod

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


@dataclass(frozen=True)
class SandboxPolicy:
    """How workers are sandboxed (worker/sandbox.py): the host paths every sandbox hides, and GPU access."""

    hide: tuple[Path, ...] = ()
    gpu: bool = False
    expose: tuple[Path, ...] = ()  # the project's folder (its fixed weights), besides the harness's
    mutable: tuple[str, ...] = ("model_under_test/",)  # what a side's sandbox shows of its tree


@dataclass
class Generated:
    """One generate round trip: its time by the harness's clock and the outputs the harness read itself."""

    seconds: float
    images: Any  # torch.Tensor [N, 3, H, W], float32, CPU
    latents: Any  # torch.Tensor [N, C, h, w]
    rows_per_image: float | None
    memory: dict[str, float]


class WorkerProcess:
    """One worker subprocess serving one side (candidate or best) of an experiment."""

    def __init__(self, side: str, root: Path, target: LaneTarget, threads: int, log_path: Path,
                 timeout_s: float = 600.0, sandbox: SandboxPolicy | None = None):
        self.side, self.root, self.target = side, root, target
        self.threads, self.log_path, self.timeout_s = threads, log_path, timeout_s
        self.sandbox = sandbox
        # outputs land in the scratch folder (host side); a sandboxed worker's names are random, so that the
        # paths a sandbox can see (its mounts) are alike for both sides
        stage = log_path.parent / "stage" / secrets.token_hex(8) if sandbox else None
        self.stage = stage
        self.scratch = (stage / "scratch") if stage else log_path.with_name(log_path.stem + "-scratch")
        self.proc: subprocess.Popen | None = None
        self.namespace: sandbox_mod.Namespace | None = None
        self.identity: dict[str, Any] = {}
        self.prelude_s = 0.0  # the worker's own start: imports, CUDA context (from its hello)
        self._buf = b""
        self._outputs = 0
        self._token = secrets.token_hex(4)  # output names of workers sharing one scratch folder stay apart

    @property
    def model_root(self) -> Path:
        """Where the worker sees its side's tree (the same path for both sides when sandboxed)."""
        return sandbox_mod.MOUNT if self.sandbox else self.root

    def _inside(self, name: str) -> str:
        return str((sandbox_mod.SCRATCH if self.sandbox else self.scratch) / name)

    def start(self) -> "WorkerProcess":
        """Spawn and wait for the worker's hello."""
        return self.spawn().handshake()

    def spawn(self) -> "WorkerProcess":
        """Start the process. Call from the main thread: the child dies with the thread that spawned it."""
        self._launch(self.argv(BOOTSTRAP), subprocess.PIPE, subprocess.PIPE)
        return self

    def argv(self, bootstrap: str) -> list[str]:
        """The command line of a worker (or of a fork server, with its own bootstrap) for this side."""
        argv = [sys.executable, "-I", "-c", bootstrap, "--root", str(self.model_root),
                "--device", self.target.device, "--threads", str(self.threads)]
        if self.target.memory_cap_gb:
            argv += ["--cap-gb", str(self.target.memory_cap_gb)]
        return argv

    def environment(self) -> dict[str, str]:
        """The variables a worker gets on top of the lane's (the same for both sides)."""
        return {**self.target.env, "PYTHONUNBUFFERED": "1", "OMP_WAIT_POLICY": "PASSIVE",
                PATH_VARIABLE: os.pathsep.join(worker_sys_path(self.root))}

    def _launch(self, argv: list[str], stdin: Any, stdout: Any) -> None:
        """Popen `argv` for this side, in its sandbox unless the policy says none."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.scratch.mkdir(parents=True, exist_ok=True)
        env = self.environment()
        with open(self.log_path, "ab") as log:
            stdout = log if stdout is None else stdout
            if self.sandbox is None:
                self.proc = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=log,
                                             cwd=self.root, env={**os.environ, **env}, bufsize=0,
                                             preexec_fn=_die_with_parent)
                return
            read_end, write_end = os.pipe()
            expose = (*self.sandbox.expose, *(Path(p) for p in worker_sys_path(self.root)))
            tree = self._stage_tree()
            spec = sandbox_mod.SandboxSpec(tree, self.scratch, self.sandbox.hide, self.sandbox.gpu, env, expose)
            try:
                self.proc = subprocess.Popen(sandbox_mod.command(spec, argv, write_end), stdin=stdin,
                                             stdout=stdout, stderr=log, bufsize=0, pass_fds=(write_end,),
                                             preexec_fn=_die_with_parent)
            finally:
                os.close(write_end)
            try:
                self.namespace = sandbox_mod.Namespace.read(read_end)
            except RuntimeError as exc:
                self.kill()
                raise Refused(f"the {self.side} worker's sandbox did not start ({exc}); see {self.log_path}; "
                              "`dit-ar doctor` checks the sandbox") from None
            finally:
                os.close(read_end)

    def _stage_tree(self) -> Path:
        """A copy of the side's mutable paths in the staging folder: all the sandbox shows of its tree."""
        assert self.stage is not None and self.sandbox is not None
        tree = self.stage / "tree"
        for rel in self.sandbox.mutable:
            src = self.root / rel.rstrip("/")
            if src.is_dir():
                shutil.copytree(src, tree / rel.rstrip("/"), symlinks=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif src.exists():
                (tree / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, tree / rel)
        tree.mkdir(parents=True, exist_ok=True)
        return tree

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

    def processes(self) -> list[int]:
        """Host PIDs of everything the worker runs: its whole sandbox, or just its process."""
        if self.namespace is not None:
            return self.namespace.pids()
        return [self.pid] if self.proc is not None and self.proc.poll() is None else []

    def freeze(self) -> None:
        """Stop every process of this side (while the other side is timed)."""
        if self.namespace is not None:
            self.namespace.freeze()
        elif self.proc is not None and self.proc.poll() is None:
            os.kill(self.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.namespace is not None:
            self.namespace.thaw()
        elif self.proc is not None and self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)

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
        images, latents = self._load(self.scratch / name, len(requests), resolution)
        return Generated(seconds, images, latents, reply.get("denoiser_rows_per_image"), reply.get("memory", {}))

    def _load(self, path: Path, n: int, resolution: int | None) -> tuple[Any, Any]:
        import torch
        from safetensors.torch import load_file

        try:
            tensors = load_file(str(path))
            images, latents = tensors["images"].float(), tensors["latents"].float()
        except (OSError, KeyError, RuntimeError, ValueError) as exc:
            raise CandidateCrash(f"{self.side} wrote no readable outputs ({type(exc).__name__}: {exc})") from None
        finally:
            path.unlink(missing_ok=True)
        want = f"[{n}, 3, {resolution or 'H'}, {resolution or 'W'}]"
        if images.ndim != 4 or images.shape[0] != n or images.shape[1] != 3 or \
                (resolution and tuple(images.shape[-2:]) != (resolution, resolution)):
            raise CandidateCrash(f"{self.side} returned images of shape {list(images.shape)}; the seam needs {want} "
                                 "(the lane's resolution)")
        if latents.ndim != 4 or latents.shape[0] != n:
            raise CandidateCrash(f"{self.side} returned latents of shape {list(latents.shape)}; "
                                 f"expected [{n}, C, h, w]")
        if not (torch.isfinite(images).all() and torch.isfinite(latents).all()):
            raise CandidateCrash(f"{self.side} produced NaN/Inf outputs")
        return images, latents

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

    def peak_rss_mb(self) -> float | None:
        """Peak resident memory of the worker's processes, summed, read by the harness from /proc (a helper
        process cannot hide memory; nothing here is reported by the worker)."""
        total = 0.0
        for pid in self.processes():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1]) / 1024
            except OSError:
                continue
        return total or None

    def gpu_memory_mb(self) -> float | None:
        """Device memory of the worker's processes on its fullest GPU as the driver sees it (NVML): the VRAM
        guardrail holds per GPU, so a candidate spread over two GPUs is judged by the larger share. None on
        CPU lanes; on a CUDA lane a missing NVML binding is a refusal (the guardrail would otherwise trust
        the worker's figure)."""
        per_gpu = self.gpu_memory_per_device_mb()
        return max(per_gpu.values()) if per_gpu else None

    def gpu_memory_per_device_mb(self) -> dict[str, float]:
        """Device memory of the worker's processes (a helper it started included) per GPU UUID (NVML)."""
        if not self.target.device.startswith("cuda"):
            return {}
        try:
            import pynvml
        except ImportError as exc:
            raise Refused("GPU memory is read through NVML and its binding is missing: "
                          "pip install nvidia-ml-py (a dependency of pytest-dit-ar)") from exc
        try:
            pynvml.nvmlInit()
            pids = set(self.processes())
            per_gpu: dict[str, float] = {}
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                used = sum(p.usedGpuMemory / 2**20 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                           if p.pid in pids and p.usedGpuMemory)
                if used:
                    uuid = pynvml.nvmlDeviceGetUUID(handle)
                    per_gpu[uuid.decode() if isinstance(uuid, bytes) else str(uuid)] = used
            return per_gpu
        except pynvml.NVMLError as exc:
            raise Refused(f"NVML could not read the workers' GPU memory ({exc}); check the driver with "
                          "`nvidia-smi`") from exc

    def close(self) -> None:
        if self.proc is None:
            return
        self.thaw()  # a frozen worker cannot read its exit request
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"op": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (BrokenPipeError, subprocess.TimeoutExpired, OSError):
                self.kill()
        self.proc = None

    def kill(self) -> None:
        if self.namespace is not None:
            self.namespace.kill()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def __enter__(self) -> "WorkerProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


class WorkerLauncher:
    """Makes the workers of one lane: same device, environment, threads, memory cap, timeout and sandbox."""

    def __init__(self, target: LaneTarget, threads: int, timeout_s: float, sandbox: SandboxPolicy | None = None):
        self.target, self.threads, self.timeout_s, self.sandbox = target, threads, timeout_s, sandbox

    def worker(self, side: str, root: Path, log_path: Path) -> WorkerProcess:
        """A worker for `side` running the model found under `root` (not started yet)."""
        return WorkerProcess(side, root, self.target, self.threads, log_path, self.timeout_s, self.sandbox)

    def model_root(self, root: Path) -> Path:
        """The path a worker of this launcher sees `root` at (what the workload's spec must name)."""
        return sandbox_mod.MOUNT if self.sandbox else root
