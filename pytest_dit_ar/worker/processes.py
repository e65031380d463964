"""What the harness knows of one worker's processes: the view the freezer, the memory watch and the reply
channel take of a worker (`SideProcesses`, which worker/handle.py's `WorkerHandle` satisfies), which of its
processes still run, and pinning their threads to cores."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
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


def host_pid(candidates: list[int], inner_pid: int) -> int | None:
    """The host PID of the process that is `inner_pid` inside its PID namespace (the last NSpid field)."""
    for pid in candidates:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("NSpid:") and int(line.split()[-1]) == inner_pid:
                    return pid
        except (OSError, ValueError):
            continue
    return None


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


def affinity_escapes(pids: list[int], cores: list[int]) -> list[str]:
    """Threads of `pids` whose CPU affinity (read from /proc, never from the worker) is not `cores`: a thread
    that moved itself off the timed core. A thread that is gone is skipped."""
    want = set(cores)
    found: list[str] = []
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for tid in tasks:
            try:
                got = os.sched_getaffinity(int(tid.name))
            except (OSError, ValueError):
                continue
            if got != want:
                found.append(f"thread {tid.name} of process {pid} on cores {sorted(got)}")
    return found


class AffinityWatch:
    """Reads the affinity of a worker's threads every `period_s` while it runs, and once more at the end, from the
    harness (a `with` block around one timed generate): a side that widens its affinity during its round and
    restores it before replying is seen too. `found` lists the first escapes (at most `keep`)."""

    def __init__(self, pids: Callable[[], list[int]], cores: list[int], period_s: float = 0.05, keep: int = 5):
        self.pids, self.cores, self.period_s, self.keep = pids, cores, period_s, keep
        self.found: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="affinity-watch")

    def _look(self) -> None:
        if len(self.found) < self.keep:
            new = [e for e in affinity_escapes(self.pids(), self.cores) if e not in self.found]
            self.found += new[:self.keep - len(self.found)]

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._look()

    def __enter__(self) -> AffinityWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._look()
