"""One experiment per GPU on the machine: sessions side by side (a worktree each) must not time on one GPU.

The repository's own lock (`.autoresearch/lock`) serialises experiments of one worktree; this lock is
machine-wide, keyed by the GPU's UUID, so it also holds across worktrees and across repositories."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from filelock import FileLock, Timeout

from dit_ar_contract.device import LaneTarget
from dit_ar_contract.errors import Refused
from dit_ar_contract.guides import cite

from ...state.paths import StatePaths


def hold_session_lock(paths: StatePaths, advice: str) -> FileLock:
    """The session's own lock (`.autoresearch/lock`: one run that times at a time per worktree), held; refused
    with `advice` when another run holds it."""
    paths.dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(paths.lock), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise Refused(f"another experiment holds {paths.lock}", way_out=advice) from None
    return lock


def lock_folder() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"dit-ar-gpu-locks-{os.getuid()}"


def acquire(uuids: list[str], folder: Path | None = None) -> list[FileLock]:
    """Hold every GPU in `uuids` (all or none); refuse naming the busy GPU."""
    folder = folder or lock_folder()
    folder.mkdir(parents=True, exist_ok=True)
    held: list[FileLock] = []
    for uuid in uuids:
        lock = FileLock(str(folder / f"{uuid}.lock"), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            release(held)
            raise Refused(f"another experiment is using GPU {uuid} (lock {lock.lock_file}): sessions side by "
                          "side need a GPU each (a lane with device cuda:N per session, "
                          f"{cite('sessions-side-by-side')})") from None
        held.append(lock)
    return held


def acquire_lane(target: LaneTarget) -> list[FileLock]:
    """The GPUs of a lane's target (none on a CPU lane)."""
    if not target.device.startswith("cuda"):
        return []
    return acquire(target.identity.uuid.split(","))


def release(locks: list[FileLock]) -> None:
    for lock in reversed(locks):
        lock.release()
    locks.clear()
