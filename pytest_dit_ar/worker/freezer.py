"""Freezing a worker between its requests: every process of its side stopped, and waited for until none has
work left in user code or in the kernel (the cgroup freezer; else SIGSTOP and the /proc states), so nothing of
one side runs while the other side is timed."""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING

from dit_ar_contract.errors import CandidateCrash

from . import cgroup
from .outputs import log_tail

if TYPE_CHECKING:
    from .processes import SideProcesses


class Freezer:
    """The frozen state of one worker and how long each of its freezes waited."""

    def __init__(self, worker: SideProcesses):
        self.worker = worker
        self.frozen = False
        self.waits: list[float] = []  # seconds each freeze waited for the worker's tasks to stop

    def freeze(self) -> None:
        """Stop every process of the worker and wait until none has work left (idempotent). A side whose
        tasks do not stop in time is a CandidateCrash (killed)."""
        w = self.worker
        if self.frozen or w.proc is None or w.proc.poll() is not None:
            return
        try:
            if w.group is not None and w.group.freezer is not None:
                waited = w.group.freeze()
            else:
                if w.namespace is not None:
                    w.namespace.freeze()
                else:
                    os.kill(w.pid, signal.SIGSTOP)
                waited = cgroup.wait_stopped(w.processes)
        except cgroup.FreezeTimeout as exc:
            w.kill()
            raise CandidateCrash(f"{w.side}: {exc} (work left running while the other side is timed)",
                                 log_tail(w.log_path)) from None
        except ProcessLookupError:
            waited = 0.0
        self.frozen = True
        self.waits.append(waited)

    def thaw(self) -> None:
        if not self.frozen:
            return
        self.frozen = False
        w = self.worker
        if w.group is not None and w.group.freezer is not None:
            w.group.thaw()
        elif w.namespace is not None:
            w.namespace.thaw()
        elif w.proc is not None and w.proc.poll() is None:
            os.kill(w.pid, signal.SIGCONT)
