"""The worker sandbox: bubblewrap (`bwrap`, Debian's `bubblewrap` package) around every worker process.

What a sandboxed worker sees and can do:
* its own PID namespace (`--unshare-pid`, `--die-with-parent`): every process it starts, daemons included,
  dies with it, and none of them can be seen from, or signal, anything outside;
* the whole filesystem read-only, with the state it has no business reading hidden (the repository's
  `.git` and `.autoresearch/`, the frozen corpora, the home directory) and one writable, private scratch
  folder (`/tmp/dit-ar/scratch`, where it writes its outputs for the harness to read);
* its side's mutable paths (model_under_test/) at `/tmp/dit-ar/side`, copied from a clean checkout of
  its commit into a staging folder with a random name (a bind mount's source path shows in
  /proc/self/mountinfo), the same for the candidate and the best, and the project's own copy of the mutable
  paths hidden, so neither side can tell which one it is;
* no network (`--unshare-net`), no capabilities (`--cap-drop ALL`), no nested user namespaces, a new
  session (no terminal to inject into), and a scrubbed environment (a short list of variables passed
  through, see ENV_PASSED);
* on CUDA lanes the NVIDIA device nodes, nothing else from /dev.
The harness freezes a whole sandbox (SIGSTOP to every process in its PID namespace) while the other side
is timed, so nothing a candidate starts can load the machine against the best.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .compile_cache import CACHE_MOUNT, cache_env

MOUNT = Path("/tmp/dit-ar/side")  # under the sandbox's own /tmp: bubblewrap cannot create folders in a read-only /
SCRATCH = Path("/tmp/dit-ar/scratch")
ENV_PASSED = ("PATH", "LANG", "LC_ALL", "TZ", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
              "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NCCL_NVLS_ENABLE",
              "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
HOW_TO_INSTALL = ("install bubblewrap (Debian/Ubuntu: `apt-get install -y bubblewrap`; Fedora: `dnf install "
                  "bubblewrap`), or run with `--unsandboxed` to judge without a sandbox (recorded in the ledger)")


@dataclass(frozen=True)
class SandboxSpec:
    """One worker's sandbox: the tree it runs, its scratch folder and what to hide."""

    side_root: Path
    scratch: Path
    hide: tuple[Path, ...] = ()
    gpu: bool = False
    env: dict[str, str] = field(default_factory=dict)
    expose: tuple[Path, ...] = ()  # folders under /tmp the worker needs (the harness, the project's weights)
    cache: Path | None = None  # the side's own tree's compile-cache folder (worker/compile_cache.py), read-write


def available() -> str | None:
    """None when bubblewrap can make the sandbox here, else why not and how to fix it."""
    if shutil.which("bwrap") is None:
        return f"bubblewrap (bwrap) is not installed: {HOW_TO_INSTALL}"
    probe = subprocess.run(["bwrap", *_isolation(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                            "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return (f"bwrap cannot create namespaces here ({probe.stderr.strip() or probe.returncode}); user "
                "namespaces may be disabled (sysctl kernel.unprivileged_userns_clone / "
                "user.max_user_namespaces); or " + HOW_TO_INSTALL.split(", or ", 1)[1])
    return None


def _isolation() -> list[str]:
    return ["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL", "--die-with-parent",
            "--new-session"]


def _private_home() -> list[Path]:
    """The home folder, or, where Python itself lives under it (pyenv), the usual private folders in it."""
    home = Path.home().resolve()
    pythons = (Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve())
    if not any(home == p or home in p.parents for p in pythons):
        return [home]
    return [home / name for name in (".ssh", ".gnupg", ".config", ".cache", ".netrc", ".git-credentials",
                                     ".gitconfig", ".local")]


def _mask(host: Path, target: Path | None = None) -> list[str]:
    """Hide `host` (seen at `target`, default the same path): a folder behind an empty tmpfs, a file behind
    /dev/null; nothing to do when it does not exist."""
    at = str(target or host)
    if host.is_dir() and not host.is_symlink():
        return ["--tmpfs", at]
    if host.exists():
        return ["--ro-bind", "/dev/null", at]
    return []


def command(spec: SandboxSpec, argv: list[str], info_fd: int) -> list[str]:
    """The bwrap command line that runs `argv` in the sandbox (cwd: the side's tree at MOUNT)."""
    cmd = ["bwrap", *_isolation(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
           "--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
    # a project, harness or virtual environment under /tmp (tests, scratch clones) stays visible
    for path in sorted({*spec.expose, Path(sys.prefix).resolve()}):
        if Path("/tmp") in path.parents:
            cmd += ["--ro-bind", str(path), str(path)]
    for hidden in (*spec.hide, *_private_home()):
        cmd += _mask(hidden)
    cmd += ["--ro-bind", str(spec.side_root), str(MOUNT), "--bind", str(spec.scratch), str(SCRATCH)]
    cache_args, cache_vars = compile_cache_mount(spec.cache)
    cmd += cache_args
    if spec.gpu:
        for node in sorted(glob.glob("/dev/nvidia*")):
            cmd += ["--dev-bind", node, node]
    cmd += ["--clearenv"]
    env = {k: os.environ[k] for k in ENV_PASSED if k in os.environ}
    env.update(spec.env)
    env.update(cache_vars)
    env.update(HOME=str(SCRATCH), TMPDIR=str(SCRATCH), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    for key, value in sorted(env.items()):
        cmd += ["--setenv", key, value]
    return cmd + ["--info-fd", str(info_fd), "--chdir", str(MOUNT), *argv]


def compile_cache_mount(cache: Path | None) -> tuple[list[str], dict[str, str]]:
    """The bind mount and environment of a side's compile cache: its own tree's folder, read-write at
    CACHE_MOUNT, and nothing of any other tree's (the state folder holding them is hidden)."""
    if cache is None:
        return [], {}
    return ["--bind", str(cache), str(CACHE_MOUNT)], cache_env(CACHE_MOUNT)


@dataclass
class Namespace:
    """The processes of one sandbox, found by the PID namespace its init process opened."""

    init_pid: int
    pid_ns: int

    @classmethod
    def read(cls, fd: int, timeout_s: float = 60.0) -> Namespace:
        """Parse bubblewrap's --info-fd JSON (written once the sandbox exists)."""
        deadline = time.monotonic() + timeout_s
        data = b""
        os.set_blocking(fd, True)
        while time.monotonic() < deadline:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
            try:
                info = json.loads(data)
                return cls(int(info["child-pid"]), int(info["pid-namespace"]))
            except (ValueError, KeyError):
                continue
        raise RuntimeError(f"bubblewrap reported no sandbox ({data[:200]!r})")

    def pids(self) -> list[int]:
        """Host PIDs of every process in the sandbox, its init included."""
        wanted = f"pid:[{self.pid_ns}]"
        found = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    if os.readlink(f"/proc/{entry.name}/ns/pid") == wanted:
                        found.append(int(entry.name))
                except OSError:
                    continue
        return found

    def signal_all(self, sig: int) -> int:
        """Send `sig` to every process until a pass finds none it has not signalled (forks are caught)."""
        done: set[int] = set()
        for _ in range(50):
            todo = [p for p in self.pids() if p not in done]
            if not todo:
                break
            for pid in todo:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
                done.add(pid)
        return len(done)

    def freeze(self) -> int:
        return self.signal_all(signal.SIGSTOP)

    def thaw(self) -> int:
        return self.signal_all(signal.SIGCONT)

    def kill(self) -> None:
        self.signal_all(signal.SIGKILL)
