"""Starting one worker process for one side: its scratch and staging folders, its compile cache, its cgroup
(joined before exec) and its sandbox (its command line's prelude is worker/bootstrap.py).

`launch` is the one place a worker (or a fork server) is Popen'd: `WorkerProcess.spawn` and the fork server's
`Zygote.spawn` call it.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dit_ar_contract.errors import Refused

from . import cgroup, seccomp
from . import sandbox as sandbox_mod
from .bootstrap import worker_sys_path
from .compile_cache import cache_env, tree_digest
from .handle import GROUP_LABEL

if TYPE_CHECKING:
    from .handle import WorkerHandle

STAGED_TIME = 946684800  # the modification time of every staged file and folder (the first second of the year 2000)
FIXED_FDS = (200, 201)  # bubblewrap's report pipe and seccomp filter, at the same numbers in every sandbox
_RESERVED: bool | None = None  # whether this process holds FIXED_FDS (fixed_fds)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _child_setup(group: cgroup.Group | None, memory_max_mb: float | None = None,
                 placed: tuple[tuple[int, int], ...] = ()):
    """The child's first steps before exec: die with the harness, join the worker's cgroup (so that everything the
    worker starts is frozen, counted and killed with it), its memory limited by the group or, where the group
    cannot, by RLIMIT_DATA (worker/host_limit.py); put bubblewrap's descriptors at their fixed numbers (`placed`:
    (descriptor, number) pairs)."""
    def setup() -> None:  # pragma: no cover - runs in the child before exec
        _die_with_parent()
        joined = group.enter() if group is not None else False
        cgroup.limit_rlimit(group, joined, memory_max_mb)
        for fd, number in placed:
            os.dup2(fd, number)
    return setup


def memory_limit_mb(w: WorkerHandle) -> float | None:
    """The worker's hard host-memory limit (its sandbox policy's; worker/host_limit.py): none unsandboxed."""
    return w.sandbox.memory_max_mb if w.sandbox is not None else None


def fixed_fds() -> tuple[int, int] | None:
    """The descriptor numbers bubblewrap gets its report pipe and its seccomp filter at (FIXED_FDS), the same for
    every sandbox: they are in its command line, which the sandbox can read (/proc/1/cmdline), and the numbers the
    harness happens to have free would tell one worker's start from another's. This process holds /dev/null at
    both numbers, so that nothing else gets them and a child can be passed them (`pass_fds`) and replace them
    before exec; None where they cannot be held (a descriptor limit below them): the free numbers are used."""
    global _RESERVED
    if _RESERVED is None:
        try:
            null = os.open(os.devnull, os.O_RDONLY)
            try:
                for number in FIXED_FDS:
                    if not _is_open(number):
                        os.dup2(null, number, inheritable=False)
            finally:
                os.close(null)
            _RESERVED = all(_is_open(n) for n in FIXED_FDS)
        except OSError:
            _RESERVED = False
    return FIXED_FDS if _RESERVED else None


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def launch(w: WorkerHandle, argv: list[str], stdin: Any, stdout: Any) -> None:
    """Popen `argv` for this side, in its sandbox unless the policy says none: in its own cgroup (joined
    before exec), under the seccomp filter, its memory sampled by the harness from the start. Its stderr (and its
    stdout unless `stdout` is given) is a pipe the harness relays into its log (worker/log_relay.py): nothing the
    process holds names its log, its side or its phase."""
    w.log_path.parent.mkdir(parents=True, exist_ok=True)
    if w.sandbox is not None:
        w.stage = Path(tempfile.mkdtemp(prefix="dit-ar-"))
        w.scratch = w.stage / "scratch"
    w.scratch.mkdir(parents=True, exist_ok=True)
    if w.sandbox is not None and sandbox_mod.privileged():
        os.chmod(w.stage, 0o755)
        os.chown(w.scratch, sandbox_mod.UNPRIVILEGED, sandbox_mod.UNPRIVILEGED)
    w.group = cgroup.open_group(GROUP_LABEL, memory_limit_mb(w))
    relay = w.relay = w.logs.relay(w.log_path).start()
    try:
        out = relay.write_fd if stdout is None else stdout
        if w.sandbox is None:
            _plain(w, argv, stdin, out, relay.write_fd)
        else:
            _sandboxed(w, argv, stdin, out, relay.write_fd)
    finally:
        relay.handed_over()
    check_group(w)
    w.memory.start()


def _plain(w: WorkerHandle, argv: list[str], stdin: Any, stdout: Any, stderr: int) -> None:
    """Without the sandbox: the process in the side's tree, the harness's environment under the worker's."""
    env = w.environment()
    cache = open_cache(w, w.root)
    if cache is not None:
        env.update(cache_env(cache))
    w.proc = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=stderr, cwd=w.root,
                              env={**os.environ, **env}, bufsize=0,
                              preexec_fn=_child_setup(w.group, memory_limit_mb(w)))


def _sandboxed(w: WorkerHandle, argv: list[str], stdin: Any, stdout: Any, stderr: int) -> None:
    """In the side's sandbox: its tree and cache staged (or left empty for a warm fork server, filled when an
    experiment adopts it), bubblewrap started, its namespace read from bubblewrap's report."""
    assert w.sandbox is not None
    read_end, write_end = os.pipe()
    if w.stages_tree_late:
        tree, cache = empty_stage(w)
    else:
        tree = stage_tree(w)
        cache = open_cache(w, tree)
    filter_fd = seccomp.filter_fd()
    fds = (write_end,) if filter_fd is None else (write_end, filter_fd)
    fixed = fixed_fds()
    numbers = fixed[:len(fds)] if fixed else fds
    try:
        w.proc = subprocess.Popen(sandbox_mod.command(sandbox_spec(w, tree, cache), argv, numbers[0],
                                                      numbers[1] if filter_fd is not None else None),
                                  stdin=stdin, stdout=stdout, stderr=stderr, bufsize=0, pass_fds=numbers,
                                  preexec_fn=_child_setup(w.group, memory_limit_mb(w),
                                                           tuple(zip(fds, numbers)) if fixed else ()))
    finally:
        for fd in fds:
            os.close(fd)
    try:
        w.namespace = sandbox_mod.Namespace.read(read_end)
    except RuntimeError as exc:
        w.kill()
        raise Refused(f"the {w.side} worker's sandbox did not start ({exc}); see {w.log_path}; "
                      "`dit-ar doctor` checks the sandbox") from None
    finally:
        os.close(read_end)


def sandbox_spec(w: WorkerHandle, tree: Path, cache: Path | None) -> sandbox_mod.SandboxSpec:
    """What the worker's sandbox shows: its staged tree, its scratch and cache copy, the policy's folders (the
    harness's import path included, read the same way for every side), the worker's environment."""
    assert w.sandbox is not None
    expose = (*w.sandbox.expose, *(Path(p) for p in worker_sys_path(w.root, w.sandbox.hide)))
    return sandbox_mod.SandboxSpec(tree, w.scratch, w.sandbox.hide, w.sandbox.gpu, w.environment(), expose,
                                   cache=cache)


def open_cache(w: WorkerHandle, tree: Path) -> Path | None:
    """The compile-cache folder this worker sees (None without caches): a sandboxed worker gets a throwaway copy
    of its tree's folder in its staging folder, whichever worker it is (a fork server's copy is filled just before
    its first fork, `fill_cache_copy`); the tree's first worker's copy is written back into the tree's folder
    (`WorkerHandle.write_back_cache`), where every later worker copies it from. So every worker sees its cache at
    the same place, bound from a folder with a random name, and a kept tree cannot count its runs there
    (docs/design/sandbox-and-security.md, "Compile caches"). An unsandboxed worker uses the tree's folder itself."""
    if w.caches is None:
        return None
    w.cache_digest = tree_digest(tree, w.mutable)
    folder, w.cache_warm = w.caches.open(w.cache_digest)
    if w.sandbox is None or w.stage is None:
        return folder
    w.cache_source = folder
    copy = w.stage / "cache"
    if w.fills_cache_late:
        copy.mkdir()
        sandbox_mod.give_to_worker(copy)
    else:
        fill_cache_copy(w)
    return copy


def fill_cache_copy(w: WorkerHandle) -> None:
    """Copy the tree's cache into the worker's throwaway folder (a fork server's before its first fork: by
    then the tree's first worker has compiled into it)."""
    if w.cache_source is None or w.stage is None:
        return
    copy = w.stage / "cache"
    shutil.copytree(w.cache_source, copy, symlinks=True, dirs_exist_ok=True)
    sandbox_mod.give_to_worker(copy)


def check_group(w: WorkerHandle) -> None:
    """Keep the cgroup only if the worker really joined it (else freezing it would stop nothing): the
    SIGSTOP and /proc fallback takes over."""
    if w.group is not None and w.proc is not None and w.proc.pid not in w.group.pids():
        w.group.remove()
        w.group = None


def stage_tree(w: WorkerHandle) -> Path:
    """A copy of the side's mutable paths in the staging folder: all the sandbox shows of its tree. Every file and
    folder of the copy gets the same fixed modification time: a checkout's times say when its tree was checked
    out (the best's long ago, the candidate's just now), which no side may read."""
    assert w.stage is not None and w.sandbox is not None
    tree = w.stage / "tree"
    for rel in w.sandbox.mutable:
        src = w.root / rel.rstrip("/")
        if src.is_dir():
            shutil.copytree(src, tree / rel.rstrip("/"), symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tree / rel)
    tree.mkdir(parents=True, exist_ok=True)
    same_times(tree)
    return tree


def same_times(root: Path) -> None:
    """Set the access and modification times of `root` and everything under it (links not followed) to
    STAGED_TIME, the folders last (writing into a folder moves its time)."""
    for dirpath, dirs, files in os.walk(root, topdown=False):
        for name in (*files, *dirs):
            os.utime(os.path.join(dirpath, name), (STAGED_TIME, STAGED_TIME), follow_symlinks=False)
    os.utime(root, (STAGED_TIME, STAGED_TIME))


def empty_stage(w: WorkerHandle) -> tuple[Path, Path]:
    """A warm fork server's tree and cache folders, empty: the tree is copied in and the cache filled when an
    experiment adopts it (`stage_late`); a bind mount shows what is written into its folder later."""
    assert w.stage is not None
    tree, cache = w.stage / "tree", w.stage / "cache"
    tree.mkdir()
    cache.mkdir()
    if sandbox_mod.privileged():
        os.chown(cache, sandbox_mod.UNPRIVILEGED, sandbox_mod.UNPRIVILEGED)
    return tree, cache


def stage_late(w: WorkerHandle) -> None:
    """Stage the side's tree into a warm fork server's empty tree folder and open the tree's compile cache (its
    copy is filled at the server's first fork, as for any fork server)."""
    assert w.stage is not None
    tree = w.stage / "tree"
    if any(tree.iterdir()):
        raise RuntimeError(f"the warm fork server's tree folder {tree} is not empty")
    stage_tree(w)
    if w.caches is not None:
        w.cache_digest = tree_digest(tree, w.mutable)
        w.cache_source, w.cache_warm = w.caches.open(w.cache_digest)
