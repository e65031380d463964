"""A fleet session's own process: the one writer of its git, ledger and best.

`dit-ar experiment`, `baseline`, `calibrate` and `revalidate` in a session bound to a slot (`init --executor
ray`) come here instead of running workers. The driver holds the session's lock, checks what it can without the
slot (branch, clean tree, one commit on the best), claims the candidate in the fleet's index (a duplicate or a
near-duplicate of a discard is refused there), sends the judging (judging.py), unpacks what the judge hands back
and records it (apply.py). A judging an earlier, killed driver left is re-attached and recorded first.

A judge lost after the candidate's code started (its node died, Ray's memory monitor killed it, ...) is a harness
error: nothing is recorded against the candidate, the branch is not reset, the claim is released, and the driver
prints one `REFUSED: harness error` line and exits 2.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dit_ar_contract.errors import EXIT_REFUSED, Refused

from ..loop.guards import gpu_locks
from ..loop.guards.checks import check_best, check_session
from ..state import gitops
from ..state.paths import new_run_id
from ..state.session import open_session
from . import apply, index, replica
from . import dispatch as dispatch_file
from .apply import Recorder
from .dispatch import PREPARE, Dispatch
from .executor import SLOT_CPUS, Executor
from .judging import Judging
from .request import JudgeLost, JudgeRequest


class Driver:
    """One fleet session's verbs, from its own process (the worktree's `dit-ar`)."""

    def __init__(self, config_path: Path, executor: Executor, out: Callable[[str], None] = print,
                 echo: Callable[[str], object] | None = sys.stdout.write):
        self.session = open_session(config_path)
        self.record = self.session.require_current_layout()
        self.repo = gitops.open_repo(self.session.root)
        self.paths, self.out = self.session.paths, out
        self.judging = Judging(executor, self.paths, out, echo)
        self.recorder = Recorder(self.session, self.repo, self.judging, out)

    # -- verbs ---------------------------------------------------------------------------------
    def experiment(self, classification: str, description: str, extra: tuple[str, ...] = (),
                   unsandboxed: bool = False, adopted_from: str = "") -> int:
        with self._locked():
            earlier = self.reattach(wait=True)
            if earlier is not None:
                self.out("dit-ar: that was the judging an earlier `dit-ar experiment` left; HEAD is now "
                         f"{gitops.head_sha(self.repo)[:10]}: commit the next idea and run `dit-ar experiment` again")
                return earlier
            check_session(self.session)  # a HALT the session's judgings left, an earlier layout
            best = check_best(self.session, self.repo, self.record.tag)
            gitops.require_branch(self.repo, self.record.tag)
            gitops.require_clean(self.repo)
            shape = gitops.candidate_commit(self.repo, best.commit)
            run_id = new_run_id(shape.sha)
            argv = ("experiment", "--classification", classification, "--description", description,
                    "--judge-only", "--run-id", run_id, *(("--unsandboxed",) if unsandboxed else ()), *extra)
            record = Dispatch("experiment", run_id, "", self.record.executor.slot, 1, PREPARE, time.time(), shape.sha,
                              shape.parent, classification, description, "unsandboxed" if unsandboxed else "")
            dispatch_file.write(self.paths, record)  # first: a claim is live while its session's record names it
            try:
                index.claim(self.repo, self.session, index.Claim(run_id, best.commit, shape.sha, description),
                            check=not adopted_from)
            except Refused:
                dispatch_file.clear(self.paths)
                raise
            try:
                return self._send(record, argv)
            finally:
                self._release_unless_recorded(run_id)

    def verb(self, kind: str, argv: tuple[str, ...]) -> int:
        """A baseline, a calibration or a re-validation in the slot (`argv`: the verb and its own arguments)."""
        with self._locked():
            earlier = self.reattach(wait=True)
            if earlier is not None:
                return earlier
            head = gitops.head_sha(self.repo)
            run_id = new_run_id(head if kind == "baseline" else kind[:7])
            return self._send(Dispatch(kind, run_id, "", self.record.executor.slot, 1, PREPARE, time.time(), head),
                              (*argv, "--judge-only", "--run-id", run_id))

    def settle(self) -> None:
        """`dit-ar status`: record a judging that a killed driver left if it has ended (never waits); a driver at
        work (it holds the session's lock) records its own."""
        try:
            with self._locked():
                self.reattach(wait=False)
        except Refused as exc:
            if "holds" not in str(exc):
                raise

    def reattach(self, wait: bool) -> int | None:
        """Record the judging an earlier driver left, once; None when there was none to record."""
        record = dispatch_file.read(self.paths)
        if record is None:
            return None
        row = apply.recorded_row(self.session, record.run_id)
        if row is not None:  # recorded before the driver died: finish what is left, never record it again
            if record.kind == "experiment":
                apply.finish(self.session, self.repo, row, self.out)
                index.add(self.repo, self.session, row)  # once: a row already in the index is not added again
            self._release_judge(record.actor)
            dispatch_file.clear(self.paths)
            return row.status.exit_code
        judged = self.judging.attach(record, wait)
        if judged is None:
            self.out(f"dit-ar: the judging of run {record.run_id} that an earlier driver left ended before the "
                     "candidate's code ran; nothing was recorded")
            self._release_unless_recorded(record.run_id)
            return None
        if judged.running:
            self.out(f"dit-ar: run {record.run_id} ({record.kind}) is being judged on {record.host or '?'} (slot "
                     f"{record.slot}, {time.time() - record.started:.0f} s); it is recorded when it ends")
            return None
        try:
            code = self.recorder.record(judged)
        finally:
            self._release_unless_recorded(record.run_id)
        return None if code == EXIT_REFUSED and judged.lost is not None else code

    def _release_judge(self, actor: str) -> None:
        try:
            judge = self.judging.executor.attach(actor)
        except JudgeLost:
            return
        if judge is not None:
            judge.release()

    def _release_unless_recorded(self, run_id: str) -> None:
        """A claim whose judging ended without a ledger row (a refusal, a harness error) is released; one still in
        flight (its dispatch record names it) stays claimed."""
        pending = dispatch_file.read(self.paths)
        if (pending is None or pending.run_id != run_id) and not apply.recorded(self.session, run_id):
            index.release(self.repo, self.session, run_id, self.recorder.ending or "ended without a verdict")

    # -- judging and recording ----------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        lock = gpu_locks.hold_session_lock(self.paths, "wait for it to finish (one judging per session at a time)")
        try:
            yield
        finally:
            lock.release()

    def _send(self, record: Dispatch, argv: tuple[str, ...]) -> int:
        config = str(self.session.config.path.resolve().relative_to(self.session.root.resolve()))
        request = JudgeRequest(record.kind, record.run_id, self.record.executor.fleet, self.record.tag,
                               self.session.lane_id, record.slot, self.recorder.gpus, SLOT_CPUS, config, argv)
        return self.recorder.record(self.judging.send(request, record,
                                                      lambda: replica.pack(self.session, self.repo)))
