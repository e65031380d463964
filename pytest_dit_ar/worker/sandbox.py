"""The worker sandbox: bubblewrap (`bwrap`, Debian's `bubblewrap` package) around every worker process.

What a sandboxed worker sees and can do:
* its own PID namespace (`--unshare-pid`, `--die-with-parent`): every process it starts, daemons included,
  dies with it, and none of them can be seen from, or signal, anything outside;
* a root built from an empty tmpfs, read-only, holding only what it needs (the system folders, Python, the
  harness and its libraries, the project's fixed files), with the state it has no business reading hidden
  (the repository's `.git` and `.autoresearch/`, the frozen corpora, /etc/shadow, the cgroup tree), and one
  writable, private scratch folder (`/tmp/dit-ar/scratch`, a fresh temporary folder of the harness's outside
  the project, where it writes its outputs) besides its own size-limited tmpfs `/tmp` and `/dev/shm`;
* its side's mutable paths (model_under_test/) at `/tmp/dit-ar/side`, copied from a clean checkout of
  its commit into a staging folder with a random name, the same for the candidate and the best, and the
  project's own copy of the mutable paths hidden, so neither side can tell which one it is;
* no network, no capabilities, no new user namespaces, a new session, a scrubbed environment (ENV_PASSED),
  a seccomp filter (worker/seccomp.py: no locks another side could see, no page-cache probes);
* an unprivileged user: `nobody` where the harness runs as root (setpriv), else the harness's own user;
* on CUDA lanes the NVIDIA device nodes, nothing else from /dev.
The harness freezes a whole side (its cgroup, worker/cgroup.py; else SIGSTOP to every process of its PID
namespace) and waits until nothing of it runs, in user code or in the kernel, while the other side is timed.
"""

from __future__ import annotations

import glob
import json
import os
import selectors
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
UNPRIVILEGED = 65534  # nobody/nogroup: the user a worker runs as when the harness runs as root
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/sys")
MASKED_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh")
UNBINDABLE = (Path("/"), Path("/tmp"), Path("/dev"), Path("/proc"), Path("/dev/shm"), Path("/sys"))
TMPFS_MB = 2048  # size limit of the sandbox's /tmp and /dev/shm (their use is also charged to its memory)
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
    expose: tuple[Path, ...] = ()  # folders the worker needs (the harness, its libraries, the project's weights)
    tmpfs_mb: int = TMPFS_MB
    cache: Path | None = None  # the side's own tree's compile-cache folder (worker/compile_cache.py), read-write


def available() -> str | None:
    """None when bubblewrap can make the sandbox here, else why not and how to fix it."""
    if shutil.which("bwrap") is None:
        return f"bubblewrap (bwrap) is not installed: {HOW_TO_INSTALL}"
    probe = subprocess.run(["bwrap", *_isolation(privileged()), "--ro-bind", "/", "/", "--dev", "/dev", "--proc",
                            "/proc", *(_drop_to_nobody() if privileged() else []), "true"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return (f"bwrap cannot create namespaces here ({probe.stderr.strip() or probe.returncode}); user "
                "namespaces may be disabled (sysctl kernel.unprivileged_userns_clone / "
                "user.max_user_namespaces); or " + HOW_TO_INSTALL.split(", or ", 1)[1])
    return None


def privileged() -> bool:
    """Whether the harness runs as root: then bubblewrap builds the sandbox with root's rights (no user
    namespace needed) and the worker itself runs as nobody (setpriv, util-linux)."""
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


def give_to_worker(root: Path) -> None:
    """Where the harness runs as root (the worker is nobody): give `root` and everything under it (links not
    followed) to nobody, so that the worker can write there; nothing to do otherwise."""
    if not privileged():
        return
    for dirpath, dirs, files in os.walk(root):
        for name in (dirpath, *(os.path.join(dirpath, n) for n in (*dirs, *files))):
            try:
                os.chown(name, UNPRIVILEGED, UNPRIVILEGED, follow_symlinks=False)
            except OSError:
                pass


def _nobody_may(st: os.stat_result, need: int) -> bool:
    """Whether nobody/nogroup (no supplementary groups) has the `need` bits (4 read, 1 search) on a file with
    stat `st`: the owner's bits if it owns it, the group's if the file is nogroup's, else the others'."""
    shift = 6 if st.st_uid == UNPRIVILEGED else 3 if st.st_gid == UNPRIVILEGED else 0
    return (st.st_mode >> shift) & need == need


def _mode_problems(folder: Path, visible: tuple[Path, ...]) -> list[tuple[Path, int]]:
    """What nobody cannot read or enter, with its mode: the folder, what is in it, and the folders above it up to
    the visible folder it lies in (the sandbox shows the project root as it is; other parents it makes 0755)."""
    above = sorted(a for v in visible if v in folder.parents for a in folder.parents if a == v or v in a.parents)
    found = []
    for path in (*above, folder, *sorted(folder.rglob("*"))):
        if not path.is_symlink():
            st = path.stat()
            if not _nobody_may(st, 0o5 if path.is_dir() else 0o4):
                found.append((path, st.st_mode & 0o777))
    return found


def outside_links(folder: Path, visible: tuple[Path, ...] = ()) -> list[str]:
    """Links under `folder` whose target lies outside it (and outside the `visible` folders) or is missing: the
    sandbox binds the folder alone, so the worker sees nothing there (a pipeline saved in the Hugging Face hub
    cache is such a folder: every file in a snapshot is a link to a blob beside it)."""
    if not folder.is_dir():
        return []
    inside = (folder.resolve(), *(v.resolve() for v in visible))
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            target = path.resolve()
            if not target.exists() or not any(t == target or t in target.parents for t in inside):
                found.append(f"{path.relative_to(folder)} -> {target}")
    return found


def unreadable(folder: Path, limit: int = 3, visible: tuple[Path, ...] = ()) -> list[str]:
    """What under `folder` the worker's user could not read, at most `limit` of them as `path (mode 0600)`:
    files nobody may not read, folders nobody may not enter (the owner's, group's or others' bits, as the kernel
    picks them for uid and gid 65534). Empty unless the harness runs as root (the worker is then nobody, who reads
    only what everyone may: `save_pretrained` writes its safetensors files 0600); as any other user the worker
    is that user and reads what it can. `visible`: folders the sandbox shows whole (the project root)."""
    if not privileged() or not folder.exists():
        return []
    return [f"{path.relative_to(folder) if folder in path.parents else path} (mode {mode:04o})"
            for path, mode in _mode_problems(folder, visible)[:limit]]


def _chmod_fix(folder: Path, visible: tuple[Path, ...]) -> str:
    """The commands that let nobody read the folder: each folder above it that nobody may not enter, then the
    folder itself."""
    problems = _mode_problems(folder, visible)
    above = [f"`chmod a+rx {path}`" for path, _ in problems if path in folder.parents]
    inside = [f"`chmod -R a+rX {folder}`"] if any(p not in folder.parents for p, _ in problems) else []
    return " and ".join(above + inside)


def unreadable_refusal(folder: Path, visible: tuple[Path, ...] = ()) -> str | None:
    """The refusal for a weights folder the sandboxed workers cannot read, with the exact fix; None when fine."""
    links = outside_links(folder, visible)
    if links:
        return (f"the weights folder {folder} holds links to files outside it ({', '.join(links[:2])}"
                f"{', ...' if len(links) > 2 else ''}), which the sandboxed workers cannot see (the sandbox shows the "
                f"folder alone); fix: copy it with the files themselves, `cp -rL {folder} {folder}-files`, and point "
                "the lane's weights (dit-ar scaffold --pipeline) at the copy")
    found = unreadable(folder, visible=visible)
    if not found:
        return None
    return (f"the weights folder {folder} holds files the workers cannot read: they run as nobody because "
            f"dit-ar runs as root, and nobody reads only what everyone may ({', '.join(found)}); fix: "
            f"{_chmod_fix(folder, visible)}, or run dit-ar as an ordinary user")


def _isolation(as_root: bool = False) -> list[str]:
    common = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
              "--die-with-parent", "--new-session"]
    if as_root:  # setpriv needs these two to become nobody; it drops them (and every other) with the uid
        return [*common, "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return [*common, "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]


def _drop_to_nobody() -> list[str]:
    return ["setpriv", f"--reuid={UNPRIVILEGED}", f"--regid={UNPRIVILEGED}", "--clear-groups", "--no-new-privs",
            "--"]


def _private_home() -> list[Path]:
    """The private folders of the home directory (hidden wherever a bound folder contains them)."""
    home = Path.home().resolve()
    return [home] + [home / name for name in (".ssh", ".gnupg", ".config", ".cache", ".netrc",
                                              ".git-credentials", ".gitconfig", ".local")]


def _mask(host: Path, target: Path | None = None) -> list[str]:
    """Hide `host` (seen at `target`, default the same path): a folder behind an empty tmpfs, a file behind
    /dev/null; nothing to do when it does not exist."""
    at = str(target or host)
    if host.is_dir() and not host.is_symlink():
        return ["--tmpfs", at]
    if host.exists():
        return ["--ro-bind", "/dev/null", at]
    return []


class _Tree:
    """The sandbox's root, built from nothing: the folders it shows are the only ones that exist in it."""

    def __init__(self) -> None:
        self.args: list[str] = ["--tmpfs", "/"]
        self.made: set[Path] = {Path("/")}
        self.bound: list[Path] = []

    def visible(self, path: Path) -> bool:
        return any(path == b or b in path.parents for b in self.bound)

    def _parents(self, path: Path) -> None:
        """Create the parents of a mount point world-traversable (bubblewrap would copy the host's modes,
        and /root is 0700: nobody could not reach a Python installed under it)."""
        for parent in reversed(path.parents):
            if parent not in self.made and not self.visible(parent):
                self.args += ["--perms", "0755", "--dir", str(parent)]
                self.made.add(parent)

    def bind(self, path: Path, target: Path | None = None, writable: bool = False) -> None:
        at = target or path
        if target is None and self.visible(path):
            return
        self._parents(at)
        self.args += ["--bind" if writable else "--ro-bind", str(path), str(at)]
        self.made.add(at)
        self.bound.append(at)

    def system(self) -> None:
        for top in SYSTEM:
            path = Path(top)
            if path.is_symlink():
                self.args += ["--symlink", os.readlink(path), top]
            elif path.is_dir():
                self.bind(path)

    def tmpfs(self, at: str, size_mb: int) -> None:
        self.args += ["--perms", "1777", "--size", str(size_mb << 20), "--tmpfs", at]
        self.made.add(Path(at))


def _python_paths() -> set[Path]:
    return {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parent}


def command(spec: SandboxSpec, argv: list[str], info_fd: int, seccomp_fd: int | None = None) -> list[str]:
    """The bwrap command line that runs `argv` in the sandbox (cwd: the side's tree at MOUNT).

    The root is an empty tmpfs holding only what a worker needs, read-only: the system folders, Python,
    the harness, the folders it imports from, the project's fixed files (its state and corpora hidden),
    its side's tree and its scratch. No home directory, no other checkout, no /sys/fs/cgroup."""
    as_root = privileged()
    tree = _Tree()
    tree.system()
    tree.args += ["--dev", "/dev", "--proc", "/proc"]
    tree.tmpfs("/tmp", spec.tmpfs_mb)
    tree.tmpfs("/dev/shm", spec.tmpfs_mb)
    if Path("/sys/fs/cgroup").is_dir():
        tree.args += ["--tmpfs", "/sys/fs/cgroup"]
    libraries = [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    wanted = {*spec.expose, *_python_paths(), *(p.resolve() for p in libraries if p.is_dir())}
    for path in sorted(wanted, key=lambda p: (len(p.parts), str(p))):
        if path.exists() and path not in UNBINDABLE and path not in MOUNT.parents:
            tree.bind(path)  # never the host's whole /tmp (a script's folder on sys.path), / or /dev
    for hidden in (*spec.hide, *_private_home(), *(Path(f) for f in MASKED_FILES)):
        if tree.visible(hidden):
            tree.args += _mask(hidden)
    tree.args += ["--perms", "0755", "--dir", str(MOUNT.parent)]
    tree.bind(spec.side_root, MOUNT)
    tree.bind(spec.scratch, SCRATCH, writable=True)
    cache_vars: dict[str, str] = {}
    if spec.cache is not None:  # its own tree's compile cache, read-write (compile_cache_mount's bind)
        tree.bind(spec.cache, CACHE_MOUNT, writable=True)
        cache_vars = cache_env(CACHE_MOUNT)
    tree.args += ["--remount-ro", "/"] + (["--remount-ro", "/sys/fs/cgroup"] if Path("/sys/fs/cgroup").is_dir()
                                          else [])
    cmd = ["bwrap", *_isolation(as_root), *tree.args]
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
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    return cmd + ["--info-fd", str(info_fd), "--chdir", str(MOUNT), *(_drop_to_nobody() if as_root else []),
                  *argv]


def compile_cache_mount(cache: Path | None) -> tuple[list[str], dict[str, str]]:
    """The bind mount and environment of a side's compile cache: its own tree's folder, read-write at
    CACHE_MOUNT, and nothing of any other tree's (the state folder holding them is hidden)."""
    if cache is None:
        return [], {}
    return ["--bind", str(cache), str(CACHE_MOUNT)], cache_env(CACHE_MOUNT)


def _state_and_start(pid: int) -> tuple[str, int] | None:
    """A process's state letter and start time in clock ticks since boot (/proc/PID/stat; a zombie's too)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _start_ticks(pid: int) -> int | None:
    """A live process's start time (None when it is gone or a zombie)."""
    found = _state_and_start(pid)
    return None if found is None or found[0] in ("Z", "X") else found[1]


@dataclass
class Namespace:
    """The processes of one sandbox, found by the PID namespace its init process opened.

    A PID namespace's inode number is reused by the kernel once the namespace is freed, often at once by the next
    sandbox any session starts, so a look after the sandbox is gone must not find that other sandbox. While the
    sandbox's own init runs (the PID and start time recorded when it was found), the number is its own. Once that
    init has ended, the kernel has killed every other process of the namespace: what is still found is those
    processes dying, unless one of them is a namespace's init (inner PID 1): then the number belongs to a newer
    sandbox (a namespace's init is its first process and the last to go), and nothing is found."""

    init_pid: int
    pid_ns: int
    init_start: int | None = None  # the init's start time (ticks since boot), read when the sandbox is found

    def __post_init__(self) -> None:
        if self.init_start is None:
            self.init_start = _start_ticks(self.init_pid)

    def alive(self) -> bool:
        """Whether the sandbox's own init still runs, in its own namespace."""
        if self.init_start is None or _start_ticks(self.init_pid) != self.init_start:
            return False
        try:
            return os.readlink(f"/proc/{self.init_pid}/ns/pid") == f"pid:[{self.pid_ns}]"
        except OSError:
            return False

    @classmethod
    def read(cls, fd: int, timeout_s: float = 60.0) -> Namespace:
        """Parse bubblewrap's --info-fd JSON (written once the sandbox exists); every wait is bounded."""
        deadline = time.monotonic() + timeout_s
        data = b""
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while time.monotonic() < deadline and len(data) < 1 << 16:
                if not sel.select(timeout=max(0.0, min(1.0, deadline - time.monotonic()))):
                    continue
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                data += chunk
                try:
                    info = json.loads(data)
                    return cls(int(info["child-pid"]), int(info["pid-namespace"]))
                except (ValueError, KeyError, TypeError):
                    continue
        raise RuntimeError(f"bubblewrap reported no sandbox ({data[:200]!r})")

    def pids(self) -> list[int]:
        """Host PIDs of every process in the sandbox, its init included (after the init has ended: its dying
        processes, never a newer sandbox's with the same namespace number)."""
        found = _namespace_members(self.pid_ns)
        if found and not self.alive() and any(_inner_pid(p) == 1 and not self._is_own_init(p) for p in found):
            return []  # another sandbox's init: the number was freed and reused
        return found

    def _is_own_init(self, pid: int) -> bool:
        """Whether `pid` is this sandbox's init, alive or a zombie not yet reaped (same PID, same start time)."""
        found = _state_and_start(pid)
        return pid == self.init_pid and found is not None and found[1] == self.init_start

    def own_pids(self, pids: list[int] | None = None) -> set[int]:
        """The sandbox's init and the command bubblewrap started under it (PID 1 and 2 inside the namespace:
        the kernel's `NSpid`, so nothing the sandboxed code does can claim either number while they live). The
        innermost PID is the sandbox's own: `pids` lists this namespace's processes only, and a nested PID
        namespace needs CAP_SYS_ADMIN, which the sandbox drops."""
        own = {self.init_pid}
        for pid in self.pids() if pids is None else pids:
            if _inner_pid(pid) in (1, 2):
                own.add(pid)
        return own

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


def _namespace_members(pid_ns: int) -> list[int]:
    """Host PIDs of the processes whose PID namespace has this inode number."""
    wanted = f"pid:[{pid_ns}]"
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.readlink(f"/proc/{entry.name}/ns/pid") == wanted:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _inner_pid(pid: int) -> int | None:
    """A process's PID in its innermost PID namespace (the last field of `NSpid` in /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None
