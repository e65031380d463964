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
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dit_ar_contract.device import LaneTarget
from dit_ar_contract.errors import CandidateCrash, Refused

from . import cgroup, protocol, seccomp
from . import sandbox as sandbox_mod
from .compile_cache import CompileCaches, cache_env, tree_digest

HELLO_TIMEOUT_S = 300.0
SCRATCH_LIMIT_MB = 4096  # what a worker may leave in its scratch folder (outputs, caches); more is a crash
OUTPUT_SLACK_MB = 64  # an output file may exceed its images' float32 size by this much (latents, header)
MEMORY_SAMPLE_S = 0.05  # how often the harness samples a worker's memory (host: cgroup; device: NVML)
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


def _chown_tree(root: Path, uid: int) -> None:
    """Give `root` and everything under it (links not followed) to `uid` (its group too)."""
    for dirpath, dirs, files in os.walk(root):
        for name in (dirpath, *(os.path.join(dirpath, n) for n in (*dirs, *files))):
            try:
                os.chown(name, uid, uid, follow_symlinks=False)
            except OSError:
                pass


def _child_setup(group: cgroup.Group | None):
    """The child's first steps before exec: die with the harness, then join the worker's cgroup (so that
    everything the worker starts is frozen, counted and killed with it)."""
    def setup() -> None:  # pragma: no cover - runs in the child before exec
        _die_with_parent()
        if group is not None:
            group.enter()
    return setup


def read_output(path: Path, limit_bytes: int) -> bytes:
    """The bytes of an output file the worker wrote, refusing anything but a plain file of bounded size: a
    FIFO, a symlink, a device or a folder in its place is the candidate's crash, never a hang or a harness
    error (opened without following links and without blocking, checked again once open)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise CandidateCrash(f"wrote no output at {path.name} ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise CandidateCrash(f"left a {_kind(st.st_mode)} where its output {path.name} belongs")
    if st.st_size > limit_bytes:
        raise CandidateCrash(f"wrote an output of {st.st_size / 2**20:.0f} MiB (at most {limit_bytes / 2**20:.0f} "
                             "MiB fits the request)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise CandidateCrash(f"left an unreadable output {path.name} ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CandidateCrash(f"swapped its output {path.name} for a special file")
        chunks, size = [], 0
        while size <= limit_bytes:
            chunk = os.read(fd, 1 << 22)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit_bytes:
            raise CandidateCrash(f"its output {path.name} grew past {limit_bytes / 2**20:.0f} MiB while read")
        return b"".join(chunks)
    except OSError as exc:
        raise CandidateCrash(f"left an unreadable output {path.name} ({exc.strerror})") from None
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "symlink"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "folder"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def parse_outputs(data: bytes) -> tuple[Any, Any]:
    """images and latents from safetensors bytes; anything malformed is the candidate's crash."""
    from safetensors.torch import load

    try:
        tensors = load(data)
        return tensors["images"].float(), tensors["latents"].float()
    except Exception as exc:  # noqa: BLE001 - whatever the parser raises on bad bytes is the candidate's doing
        raise CandidateCrash(f"wrote outputs the harness cannot read ({type(exc).__name__}: {str(exc)[:200]})") \
            from None


def folder_bytes(root: Path, stop_at: int) -> int:
    """Bytes of the files under `root` (links not followed), counting stops once past `stop_at`."""
    total, todo = 0, [root]
    while todo and total <= stop_at:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(Path(entry.path))
                else:
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
    return total


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


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
                 timeout_s: float = 600.0, sandbox: SandboxPolicy | None = None,
                 caches: CompileCaches | None = None, mutable: tuple[str, ...] = ("model_under_test/",)):
        self.side, self.root, self.target = side, root, target
        self.threads, self.log_path, self.timeout_s = threads, log_path, timeout_s
        self.sandbox = sandbox
        self.caches, self.mutable = caches, (sandbox.mutable if sandbox else mutable)
        self.cache_digest: str | None = None  # the tree's compile cache (set at spawn)
        self.cache_warm: bool | None = None  # an earlier worker of the same tree filled the cache (None: no caches)
        # outputs land in the scratch folder (host side); a sandboxed worker's is a fresh temporary folder
        # with a random name outside the project (its bind source shows in /proc/self/mountinfo), removed with
        # the worker: nothing it writes survives it
        self.stage: Path | None = None
        self.scratch = log_path.with_name(log_path.stem + "-scratch")
        self.proc: subprocess.Popen | None = None
        self.namespace: sandbox_mod.Namespace | None = None
        self.group: cgroup.Group | None = None
        self.frozen = False
        self.freeze_waits: list[float] = []  # seconds each freeze waited for the worker's tasks to stop
        self._host_memory: cgroup.Sampler | None = None
        self._gpu_memory: cgroup.Sampler | None = None
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
        """Popen `argv` for this side, in its sandbox unless the policy says none: in its own cgroup (joined
        before exec), under the seccomp filter, its memory sampled by the harness from the start."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.sandbox is not None:
            self.stage = Path(tempfile.mkdtemp(prefix="dit-ar-"))
            self.scratch = self.stage / "scratch"
        self.scratch.mkdir(parents=True, exist_ok=True)
        if self.sandbox is not None and sandbox_mod.privileged():
            os.chmod(self.stage, 0o755)
            os.chown(self.scratch, sandbox_mod.UNPRIVILEGED, sandbox_mod.UNPRIVILEGED)
        self.group = cgroup.open_group(self.side)
        env = self.environment()
        with open(self.log_path, "ab") as log:
            stdout = log if stdout is None else stdout
            if self.sandbox is None:
                cache = self._open_cache(self.root)
                if cache is not None:
                    env.update(cache_env(cache))
                self.proc = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=log,
                                             cwd=self.root, env={**os.environ, **env}, bufsize=0,
                                             preexec_fn=_child_setup(self.group))
                self._check_group()
                self._start_sampling()
                return
            read_end, write_end = os.pipe()
            expose = (*self.sandbox.expose, *(Path(p) for p in worker_sys_path(self.root)))
            tree = self._stage_tree()
            spec = sandbox_mod.SandboxSpec(tree, self.scratch, self.sandbox.hide, self.sandbox.gpu, env, expose,
                                           cache=self._open_cache(tree))
            filter_fd = seccomp.filter_fd()
            fds = (write_end,) if filter_fd is None else (write_end, filter_fd)
            try:
                self.proc = subprocess.Popen(sandbox_mod.command(spec, argv, write_end, filter_fd), stdin=stdin,
                                             stdout=stdout, stderr=log, bufsize=0, pass_fds=fds,
                                             preexec_fn=_child_setup(self.group))
            finally:
                for fd in fds:
                    os.close(fd)
            try:
                self.namespace = sandbox_mod.Namespace.read(read_end)
            except RuntimeError as exc:
                self.kill()
                raise Refused(f"the {self.side} worker's sandbox did not start ({exc}); see {self.log_path}; "
                              "`dit-ar doctor` checks the sandbox") from None
            finally:
                os.close(read_end)
        self._check_group()
        self._start_sampling()

    def _open_cache(self, tree: Path) -> Path | None:
        """The compile-cache folder of the tree this worker runs (None without caches); a sandboxed worker
        that runs as nobody (the harness is root) owns it, so that it can write its compiled kernels."""
        if self.caches is None:
            return None
        self.cache_digest = tree_digest(tree, self.mutable)
        folder, self.cache_warm = self.caches.open(self.cache_digest)
        if self.sandbox is not None and sandbox_mod.privileged():
            _chown_tree(folder, sandbox_mod.UNPRIVILEGED)
        return folder

    def note_start(self, seconds: float) -> None:
        """Record this worker's start-up (build + warm-up) in its tree's record, as cold or warm."""
        if self.caches is not None and self.cache_digest is not None:
            self.caches.note_start(self.cache_digest, seconds, bool(self.cache_warm))

    def note_peak(self, peak_mb: float | None) -> None:
        """Record the device memory this worker was seen to use in its tree's record (the memory plan reads it)."""
        if self.caches is not None and self.cache_digest is not None:
            self.caches.note_peak(self.cache_digest, peak_mb)

    def _check_group(self) -> None:
        """Keep the cgroup only if the worker really joined it (else freezing it would stop nothing): the
        SIGSTOP and /proc fallback takes over."""
        if self.group is not None and self.proc is not None and self.proc.pid not in self.group.pids():
            self.group.remove()
            self.group = None

    def _start_sampling(self) -> None:
        """Sample the worker's memory from the harness while it lives: its cgroup's anonymous + shared
        memory (tmpfs, /dev/shm, memfd), or the /proc fallback; device memory through NVML on CUDA lanes."""
        self._host_memory = cgroup.Sampler(self.held_memory_mb, MEMORY_SAMPLE_S).start()
        if self.target.device.startswith("cuda"):
            self._gpu_memory = cgroup.Sampler(self._gpu_now_mb, MEMORY_SAMPLE_S * 2).start()

    def held_memory_mb(self) -> float | None:
        """The memory the worker's processes hold now (host), as the harness reads it."""
        group = self.group  # read once: kill() may drop it from another thread
        if group is not None and group.memory is not None:
            return group.held_mb()
        pids = self.processes()
        init = self.namespace.init_pid if self.namespace else None
        roots = [Path(f"/proc/{init}/root/tmp"), Path(f"/proc/{init}/root/dev/shm")] if init else []
        return cgroup.proc_memory_mb(pids, roots) if pids else None

    def _gpu_now_mb(self) -> float | None:
        if self.proc is None:
            return None
        try:
            return self._gpu_memory_once_mb()
        except Refused:
            return None

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
                                 str(hello.get("traceback", "")) + log_tail(self.log_path))
        identity = hello.get("identity")
        if not isinstance(identity, dict):
            raise CandidateCrash(f"{self.side} worker's hello carries no identity", log_tail(self.log_path))
        self.identity = identity
        self.prelude_s = _number(hello.get("prelude_s")) or 0.0
        self.freeze()  # frozen between requests in every phase: the quality run looks like the timed rounds
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
        """Stop every process of this side and wait until none has work left, in user code or in the kernel
        (the cgroup freezer; else SIGSTOP and /proc states). Idempotent. A side whose tasks do not stop in
        time is a CandidateCrash (killed)."""
        if self.frozen or self.proc is None or self.proc.poll() is not None:
            return
        try:
            if self.group is not None and self.group.freezer is not None:
                waited = self.group.freeze()
            else:
                if self.namespace is not None:
                    self.namespace.freeze()
                else:
                    os.kill(self.pid, signal.SIGSTOP)
                waited = cgroup.wait_stopped(self.processes)
        except cgroup.FreezeTimeout as exc:
            self.kill()
            raise CandidateCrash(f"{self.side}: {exc} (work left running while the other side is timed)",
                                 log_tail(self.log_path)) from None
        except ProcessLookupError:
            waited = 0.0
        self.frozen = True
        self.freeze_waits.append(waited)

    def thaw(self) -> None:
        if not self.frozen:
            return
        self.frozen = False
        if self.group is not None and self.group.freezer is not None:
            self.group.thaw()
        elif self.namespace is not None:
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
        memory = reply.get("memory")
        memory = {str(k): v for k, v in memory.items() if _number(v) is not None} if isinstance(memory, dict) else {}
        return Generated(seconds, images, latents, _number(reply.get("denoiser_rows_per_image")), memory)

    def _load(self, path: Path, n: int, resolution: int | None) -> tuple[Any, Any]:
        import torch

        limit = (n * 3 * resolution * resolution * 4 if resolution else 1 << 30) + (OUTPUT_SLACK_MB << 20)
        try:
            images, latents = parse_outputs(read_output(path, limit))
        except CandidateCrash as exc:
            raise CandidateCrash(f"{self.side} {exc}", log_tail(self.log_path)) from None
        finally:
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass
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
        self.thaw()
        start = time.perf_counter()
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise CandidateCrash(f"{self.side} worker died before {op}", log_tail(self.log_path)) from None
        reply = self._read(timeout_s or self.timeout_s)
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

    def _read(self, timeout_s: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                if len(self._buf) > protocol.MAX_LINE:
                    self.kill()
                    raise CandidateCrash(f"{self.side} worker sent a reply line over {protocol.MAX_LINE >> 20} MiB "
                                         "(killed)", log_tail(self.log_path))
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
            try:
                code = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
                code = "none: closed its output and was killed"
            raise CandidateCrash(f"{self.side} worker died (exit code {code})", log_tail(self.log_path))
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return protocol.decode(line)
        except ValueError as exc:  # json's errors are ValueErrors, and so is a reply that is not an object
            self.kill()
            raise CandidateCrash(f"{self.side} worker sent a malformed reply ({str(exc)[:200]}; killed)",
                                 log_tail(self.log_path)) from None

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
        """Peak host memory of everything the worker runs, sampled by the harness every MEMORY_SAMPLE_S: its
        cgroup's anonymous + shared memory (files in its tmpfs and /dev/shm, memfds), or the /proc fallback.
        Nothing the worker can reset (VmHWM, which /proc/self/clear_refs erases, is not used)."""
        if self._host_memory is None:
            return None
        return self._host_memory.sample()

    def kernel_peak_mb(self) -> float | None:
        """The cgroup's own high-water mark (page cache included), for reference."""
        return self.group.kernel_peak_mb() if self.group is not None else None

    def gpu_memory_mb(self) -> float | None:
        """Device memory of the worker's processes on its fullest GPU as the driver sees it (NVML): the VRAM
        guardrail holds per GPU, so a candidate spread over two GPUs is judged by the larger share. None on
        CPU lanes; on a CUDA lane a missing NVML binding is a refusal (the guardrail would otherwise trust
        the worker's figure)."""
        if self._gpu_memory is not None:
            self._gpu_memory.sample()
            return self._gpu_memory.peak
        return self._gpu_memory_once_mb()

    def _gpu_memory_once_mb(self) -> float | None:
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
                pass
        self.kill()  # whatever it started dies with it, frozen or not
        self.proc = None

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
        self.frozen = False
        self._wait_gone()
        for sampler in (self._host_memory, self._gpu_memory):
            if sampler is not None:
                sampler.stop_thread()
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
        while self.namespace.pids() and time.monotonic() < deadline:
            self.namespace.kill()
            time.sleep(0.02)

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
