"""One judging sent to a slot, from the driver's side: the dispatch record, the retry, the wait.

`send` writes the dispatch record (phase `prepare`), creates the judge on the session's slot and waits for its
replica. Before the candidate's code may start it rewrites the record with phase `run` (fsynced), then starts
the judge and waits, printing the judge's output as it comes and mirroring its live.json for `dit-ar watch`.

A judge lost before that line (`request.JudgeLost`: its node died, Ray's memory monitor killed it, ...) is judged
again once, as `attempt 2`; a second loss is a refusal that records nothing. A judge lost after it is a harness
error too (`Judged.lost`): nothing is recorded against the candidate and it is not judged again by itself; the
driver says why and exits 2. The candidate's own failures (a crash, its worker killed at its memory limit) happen
inside the judging and come back in its reply. Ray's own retries are off for judges (ray_executor.py): this is the
only retry there is.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from dit_ar_contract.errors import Refused

from ..state.files import write_json_atomic
from ..state.live import LiveState
from ..state.paths import StatePaths
from . import dispatch as dispatch_file
from .dispatch import PREPARE, RUN, Dispatch
from .executor import IDLE, PREPARED, RUNNING, Executor, Judge
from .request import RETRIED_ANYWHERE, JudgeLost, JudgeReply, JudgeRequest, ReplicaPayload

POLL_S = 0.5  # how long one wait for the reply blocks before the output and progress are read again
MIRROR_S = 2.0
ATTEMPTS = 2


class Echo:
    """The judge's output, written line by line as it comes, its last line held back: the driver ends with a
    line of its own (the verdict it recorded), as a local run ends with its verdict."""

    def __init__(self, write: Callable[[str], object] | None = None):
        self.write = write
        self.buffer = b""
        self.held: str | None = None

    def feed(self, data: bytes) -> None:
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if self.held is not None and self.write is not None:
                self.write(self.held + "\n")
            self.held = line.decode(errors="replace")

    def close(self) -> str:
        """The held last line (the judge's own verdict or refusal line)."""
        if self.buffer:
            self.feed(b"\n")
        return self.held or ""


@dataclass(frozen=True)
class Judged:
    """How a judging ended: its last dispatch record and, unless the judge was lost, the reply and the judge."""

    dispatch: Dispatch
    reply: JudgeReply | None = None
    judge: Judge | None = None
    running: bool = False  # re-attached without waiting, and the judge is still at work
    lost: JudgeLost | None = None  # lost after the candidate's code started: a harness error


class Judging:
    """The driver's side of one judging (send, wait), for one session's state folder."""

    def __init__(self, executor: Executor, paths: StatePaths, out: Callable[[str], None],
                 echo: Callable[[str], object] | None = sys.stdout.write):
        self.executor, self.paths, self.out, self.echo = executor, paths, out, echo
        self.judge_line = ""

    def send(self, request: JudgeRequest, record: Dispatch, pack: Callable[[], ReplicaPayload]) -> Judged:
        """`pack` makes the session's payload, while the judge's process starts (the first attempt's is reused)."""
        payload: ReplicaPayload | None = None
        for attempt in range(1, ATTEMPTS + 1):
            req = dataclasses.replace(request, attempt=attempt)
            record = record.moved(attempt=attempt, actor=req.actor, phase=PREPARE, started=time.time())
            dispatch_file.write(self.paths, record)
            judge = self.executor.judge(req)
            try:
                payload = payload or pack()
                prepared = judge.prepare(payload)
                where = prepared.placement
                record = record.moved(phase=RUN, node=where.node_id, host=where.host)
                dispatch_file.write(self.paths, record)  # on disk before any code of the candidate can run
                judge.start()
                return Judged(record, self.wait(judge), judge)
            except Refused:  # the harness failed in the judge: nothing to record
                judge.release()
                dispatch_file.clear(self.paths)
                raise
            except JudgeLost as lost:
                judge.release()
                if record.phase == RUN and record.kind not in RETRIED_ANYWHERE:
                    return Judged(record, lost=lost)
                if attempt < ATTEMPTS:
                    self.out(f"dit-ar: the judge ({record.host or 'its node'}) was lost before the candidate's code "
                             f"ran ({lost}); judging again (attempt {attempt + 1})")
        dispatch_file.clear(self.paths)
        raise Refused(f"the judge was lost {ATTEMPTS} times before the candidate's code ran (slot {record.slot}); "
                      "nothing was recorded and HEAD was kept: check the slot's node (`dit-ar fleet status`, "
                      "`dit-ar fleet doctor`)")

    def wait(self, judge: Judge) -> JudgeReply:
        """The reply, the output printed and the progress mirrored meanwhile (JudgeLost when the judge dies)."""
        echo, offset, mirrored = Echo(self.echo), 0, 0.0
        while True:
            reply = judge.result(POLL_S)
            offset = self._drain(judge, echo, offset)
            if reply is not None or time.time() - mirrored > MIRROR_S:
                self.mirror(judge.progress())
                mirrored = time.time()
            if reply is not None:
                self.judge_line = echo.close()
                return reply

    @staticmethod
    def _drain(judge: Judge, echo: Echo, offset: int) -> int:
        while True:
            data = judge.output(offset)
            if not data:
                return offset
            echo.feed(data)
            offset += len(data)

    def mirror(self, data: bytes | None) -> None:
        """The judge's live.json as this session's, under this process's pid (`dit-ar watch` checks it runs)."""
        if not data:
            return
        try:
            state = LiveState.from_dict(json.loads(data))
        except (ValueError, TypeError, KeyError):
            return
        write_json_atomic(self.paths.live, dataclasses.replace(state, pid=os.getpid()).as_dict())

    def attach(self, record: Dispatch, wait: bool = True) -> Judged | None:
        """A judging an earlier driver left: its reply (waited for unless `wait` is off: then a `Judged` that is
        still running), a lost judge's `Judged` (`lost`: a harness error), or None when nothing of the candidate
        ran (the record is dropped and nothing is recorded)."""
        lost = JudgeLost("judge-died", f"{record.actor or 'no judge'}: gone when its session came back to it")
        try:
            judge = self.executor.attach(record.actor)
            state = judge.state() if judge is not None else None
            if judge is not None and state in (IDLE, PREPARED):  # the driver died before it started the verb
                judge.release()
                dispatch_file.clear(self.paths)
                return None
            if judge is not None and state == RUNNING and not wait:
                return Judged(record, judge=judge, running=True)
            if judge is not None:
                return Judged(record, self.wait(judge), judge)
        except JudgeLost as exc:
            lost = exc
        if record.phase == RUN and record.kind not in RETRIED_ANYWHERE:
            return Judged(record, lost=lost)
        dispatch_file.clear(self.paths)
        return None
