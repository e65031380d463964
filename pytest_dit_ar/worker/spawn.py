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
from .compile_cache import COMPILE_IN_PROCESS, cache_env, tree_digest

if TYPE_CHECKING:
    from .handle import WorkerHandle

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


def _child_setup(group: cgroup.Group | None, memory_max_mb: float | None = None):
    """The child's first steps before exec: die with the harness, then join the worker's cgroup (so that
    everything the worker starts is frozen, counted and killed with it), its memory limited by the group or, where
    the group cannot, by RLIMIT_DATA (worker/host_limit.py)."""
    def setup() -> None:  # pragma: no cover - runs in the child before exec
        _die_with_parent()
        joined = group.enter() if group is not None else False
        cgroup.limit_rlimit(group, joined, memory_max_mb)
    return setup


def memory_limit_mb(w: WorkerHandle) -> float | None:
    """The worker's hard host-memory limit (its sandbox policy's; worker/host_limit.py): none unsandboxed."""
    return w.sandbox.memory_max_mb if w.sandbox is not None else None


def launch(w: WorkerHandle, argv: list[str], stdin: Any, stdout: Any) -> None:
    """Popen `argv` for this side, in its sandbox unless the policy says none: in its own cgroup (joined
    before exec), under the seccomp filter, its memory sampled by the harness from the start."""
    w.log_path.parent.mkdir(parents=True, exist_ok=True)
    if w.sandbox is not None:
        w.stage = Path(tempfile.mkdtemp(prefix="dit-ar-"))
        w.scratch = w.stage / "scratch"
    w.scratch.mkdir(parents=True, exist_ok=True)
    if w.sandbox is not None and sandbox_mod.privileged():
        os.chmod(w.stage, 0o755)
        os.chown(w.scratch, sandbox_mod.UNPRIVILEGED, sandbox_mod.UNPRIVILEGED)
    w.group = cgroup.open_group(w.side, memory_limit_mb(w))
    env = w.environment()
    with open(w.log_path, "ab") as log:
        stdout = log if stdout is None else stdout
        if w.sandbox is None:
            cache = open_cache(w, w.root)
            if cache is not None:
                env.update(cache_env(cache))
            env.update(compile_settings(w))
            w.proc = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=log,
                                         cwd=w.root, env={**os.environ, **env}, bufsize=0,
                                         preexec_fn=_child_setup(w.group, memory_limit_mb(w)))
            check_group(w)
            w.memory.start()
            return
        read_end, write_end = os.pipe()
        expose = (*w.sandbox.expose, *(Path(p) for p in worker_sys_path(w.root)))
        if w.stages_tree_late:  # a warm fork server: its tree and cache are filled when an experiment adopts it
            tree, cache = empty_stage(w)
        else:
            tree = stage_tree(w)
            cache = open_cache(w, tree)
        env.update(compile_settings(w))
        spec = sandbox_mod.SandboxSpec(tree, w.scratch, w.sandbox.hide, w.sandbox.gpu, env, expose, cache=cache)
        filter_fd = seccomp.filter_fd()
        fds = (write_end,) if filter_fd is None else (write_end, filter_fd)
        try:
            w.proc = subprocess.Popen(sandbox_mod.command(spec, argv, write_end, filter_fd), stdin=stdin,
                                         stdout=stdout, stderr=log, bufsize=0, pass_fds=fds,
                                         preexec_fn=_child_setup(w.group, memory_limit_mb(w)))
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
    check_group(w)
    w.memory.start()


def open_cache(w: WorkerHandle, tree: Path) -> Path | None:
    """The compile-cache folder of the tree this worker runs (None without caches); a sandboxed worker
    that runs as nobody (the harness is root) owns it, so that it can write its compiled kernels.

    Only the tree's first worker (its cold one: the quality worker of the experiment that judged it) writes
    the tree's folder itself. Every later sandboxed worker, and every fork server, gets a throwaway copy in
    its staging folder (a fork server's is filled just before its first fork, `fill_cache_copy`), so what a
    tree sees in its cache is the same in every later worker: a kept tree cannot count its runs there and
    tell the experiments where it is the best (docs/design/sandbox-and-security.md, "Compile caches")."""
    if w.caches is None:
        return None
    w.cache_digest = tree_digest(tree, w.mutable)
    folder, w.cache_warm = w.caches.open(w.cache_digest)
    if w.sandbox is not None and w.stage is not None and (w.cache_warm or w.fills_cache_late):
        w.cache_source, folder = folder, w.stage / "cache"
        if w.fills_cache_late:
            folder.mkdir()
        else:
            fill_cache_copy(w)
            return folder
    if w.sandbox is not None and sandbox_mod.privileged():
        _chown_tree(folder, sandbox_mod.UNPRIVILEGED)
    return folder


def fill_cache_copy(w: WorkerHandle) -> None:
    """Copy the tree's cache into the worker's throwaway folder (a fork server's before its first fork: by
    then the tree's first worker has compiled into it)."""
    if w.cache_source is None or w.stage is None:
        return
    copy = w.stage / "cache"
    shutil.copytree(w.cache_source, copy, symlinks=True, dirs_exist_ok=True)
    if sandbox_mod.privileged():
        _chown_tree(copy, sandbox_mod.UNPRIVILEGED)


def compile_settings(w: WorkerHandle) -> dict[str, str]:
    """No compile pool for a worker whose tree's cache is filled (compile_cache.COMPILE_IN_PROCESS)."""
    return dict(COMPILE_IN_PROCESS) if w.cache_warm else {}


def check_group(w: WorkerHandle) -> None:
    """Keep the cgroup only if the worker really joined it (else freezing it would stop nothing): the
    SIGSTOP and /proc fallback takes over."""
    if w.group is not None and w.proc is not None and w.proc.pid not in w.group.pids():
        w.group.remove()
        w.group = None


def stage_tree(w: WorkerHandle) -> Path:
    """A copy of the side's mutable paths in the staging folder: all the sandbox shows of its tree."""
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
    return tree


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


def write_back_cache(w: WorkerHandle) -> None:
    """The tree's first worker, forked from a warm server, compiled into its server's throwaway copy: that copy
    becomes the tree's folder, as an exec'd first worker writes the folder itself."""
    if w.cache_source is None or w.stage is None or w.cache_warm is not False:
        return
    shutil.copytree(w.stage / "cache", w.cache_source, symlinks=True, dirs_exist_ok=True)
    if w.sandbox is not None and sandbox_mod.privileged():
        _chown_tree(w.cache_source, sandbox_mod.UNPRIVILEGED)
