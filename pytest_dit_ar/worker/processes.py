"""What the harness knows of one worker's processes: the view the freezer, the memory watch and the reply
channel take of a worker (`SideProcesses`, which worker/handle.py's `WorkerHandle` satisfies), which of its
processes still run, and pinning their threads to cores."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from . import cgroup

if TYPE_CHECKING:
    from dit_ar_contract.device import LaneTarget

    from .sandbox import Namespace


class SideProcesses(Protocol):
    """One side's worker as its freezer, memory watch and reply channel see it: its process (and sandbox and
    cgroup, once started), its host PIDs, and how to kill it all."""

    side: str
    log_path: Path
    target: LaneTarget
    proc: subprocess.Popen | None
    namespace: Namespace | None
    group: cgroup.Group | None

    @property
    def pid(self) -> int: ...

    def processes(self) -> list[int]: ...

    def kill(self) -> None: ...


def running(pids: list[int]) -> list[int]:
    """The processes of `pids` that are not zombies: a zombie has exited, its memory, descriptors and GPU
    context are released, and only its parent's wait is missing (the sandbox's init after a graceful exit
    stays a zombie for 1.3-2 s on the 2-core VM: waiting for it would slow every close)."""
    states = cgroup.task_states(pids)
    return [p for p in pids if states.get(p, "Z") not in ("Z", "X")]


def pin_threads(pids: list[int], cores: list[int]) -> None:
    """Pin every thread of `pids` to `cores` (a process or thread that is gone is skipped)."""
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for tid in tasks:
            try:
                os.sched_setaffinity(int(tid.name), set(cores))
            except (OSError, ValueError):
                pass
