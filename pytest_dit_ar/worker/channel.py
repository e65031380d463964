"""The worker's replies: JSON lines on its private stdout pipe, each read within a deadline and at most
`protocol.MAX_LINE` long. A worker that goes silent, floods, dies or sends a malformed line is killed and is the
candidate's crash."""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from typing import TYPE_CHECKING, Any

from dit_ar_contract.errors import CandidateCrash

from . import cgroup, protocol
from .outputs import log_tail

if TYPE_CHECKING:
    from .processes import SideProcesses


class Replies:
    """The reply lines of one worker (bytes read past a line are kept for the next reply)."""

    def __init__(self, worker: SideProcesses):
        self.worker = worker
        self.buf = b""

    def read(self, timeout_s: float) -> dict[str, Any]:
        w = self.worker
        assert w.proc is not None and w.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        fd = w.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.buf:
                if len(self.buf) > protocol.MAX_LINE:
                    w.kill()
                    raise CandidateCrash(f"{w.side} worker sent a reply line over {protocol.MAX_LINE >> 20} MiB "
                                         "(killed)", log_tail(w.log_path))
                left = deadline - time.monotonic()
                if left <= 0:
                    w.kill()
                    raise CandidateCrash(f"{w.side} worker gave no answer within {timeout_s:.0f} s "
                                         "(killed)", log_tail(w.log_path))
                if not sel.select(timeout=min(left, 1.0)):
                    if w.proc.poll() is not None:
                        break
                    continue
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                self.buf += chunk
        if b"\n" not in self.buf:
            try:
                code = w.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
                code = "none: closed its output and was killed"
            died = cgroup.oom_note(w.group)  # the kernel killed it at its memory limit: says so
            raise CandidateCrash(f"{w.side} worker died (exit code {code}{'; ' + died if died else ''})",
                                 log_tail(w.log_path))
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            return protocol.decode(line)
        except ValueError as exc:  # json's errors are ValueErrors, and so is a reply that is not an object
            w.kill()
            raise CandidateCrash(f"{w.side} worker sent a malformed reply ({str(exc)[:200]}; killed)",
                                 log_tail(w.log_path)) from None
