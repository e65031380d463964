"""A fleet session's own process: the one writer of its git, ledger and best.

`dit-ar experiment`, `baseline`, `calibrate` and `revalidate` in a session bound to a slot (`init --executor
ray`) come here instead of running workers. The driver holds the session's lock, checks what it can without the
slot (branch, clean tree, one commit on the best, a duplicate in the fleet), sends the judging (judging.py),
unpacks what the judge hands back and records it (apply.py). A judging an earlier, killed driver left is
re-attached and recorded first.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dit_ar_contract.errors import EXIT_REFUSED, Refused

from ..loop import conclusion
from ..loop.guards import gpu_locks
from ..loop.guards.checks import check_best, check_session
from ..state import gitops
from ..state.paths import new_run_id
from ..state.session import open_session
from . import apply, archive, index, payload
from . import dispatch as dispatch_file
from .dispatch import PREPARE, Dispatch
from .executor import SLOT_CPUS, Executor
from .judging import Judged, Judging
from .request import JudgeRequest


class Driver:
    """One fleet session's verbs, from its own process (the worktree's `dit-ar`)."""

    def __init__(self, config_path: Path, executor: Executor, out: Callable[[str], None] = print,
                 echo: Callable[[str], object] | None = sys.stdout.write):
        self.session = open_session(config_path)
        self.record = self.session.require_current_layout()
        self.repo = gitops.open_repo(self.session.root)
        self.paths, self.out = self.session.paths, out
        self.judging = Judging(executor, self.paths, out, echo)

    @property
    def gpus(self) -> int:
        return self.session.lane.gpus if self.session.lane.is_cuda else 0

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
            if not adopted_from:
                index.refuse_duplicate(self.repo, self.session, best.commit, shape.sha)
            run_id = new_run_id(shape.sha)
            argv = ("experiment", "--classification", classification, "--description", description,
                    "--judge-only", "--run-id", run_id, *(("--unsandboxed",) if unsandboxed else ()), *extra)
            return self._send(Dispatch("experiment", run_id, "", self.record.executor.slot, 1, PREPARE, time.time(),
                                       shape.sha, shape.parent, classification, description,
                                       "unsandboxed" if unsandboxed else ""), argv)

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
            judge = self.judging.executor.attach(record.actor)
            if judge is not None:
                judge.release()
            dispatch_file.clear(self.paths)
            return row.status.exit_code
        judged = self.judging.attach(record, wait)
        if judged is None:
            self.out(f"dit-ar: the judging of run {record.run_id} that an earlier driver left ended before the "
                     "candidate's code ran; nothing was recorded")
            return None
        if judged.running:
            self.out(f"dit-ar: run {record.run_id} ({record.kind}) is being judged on {record.host or '?'} (slot "
                     f"{record.slot}, {time.time() - record.started:.0f} s); it is recorded when it ends")
            return None
        return self._record(judged)

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
                               self.session.lane_id, record.slot, self.gpus, SLOT_CPUS, config, argv)
        return self._record(self.judging.send(request, record, lambda: payload.pack(self.session, self.repo)))

    def _record(self, judged: Judged) -> int:
        record, reply = judged.dispatch, judged.reply
        run_dir = self.paths.run(record.run_id)
        if reply is None:  # lost after the candidate's code started
            outcome = apply.node_lost(self.session, record, self.gpus)
            return self._experiment_recorded(outcome, run_dir, judged)
        assert judged.judge is not None
        data = judged.judge.archive(reply.archive_size)
        archive.unpack(data, self.session.root,
                       archive.allowed_members(self.paths, record.kind, record.run_id, self.session.lane_id))
        run_dir.mkdir(parents=True, exist_ok=True)
        provenance = apply.provenance(record, reply, self.gpus)
        apply.note_provenance(run_dir, provenance)
        if reply.halt:  # what the run changed on the node that the harness relies on: this session halts
            where = reply.placement
            self.paths.halt.write_text(f"on {where.host} (node {where.node_id[:12]}):\n{reply.halt}")
        if record.kind == "experiment":
            outcome = conclusion.read(run_dir)
            if outcome is not None:
                return self._experiment_recorded(apply.with_attempt(outcome, record, provenance), run_dir, judged)
        elif reply.exit_code == 0 or (reply.exit_code == 1 and record.kind != "baseline"):
            return self._verb_recorded(record.kind, run_dir, reply.exit_code, judged)  # 1: ended, nothing to record
        return self._refused(reply.exit_code, judged)

    def _experiment_recorded(self, outcome: conclusion.ExperimentOutcome, run_dir: Path, judged: Judged) -> int:
        apply.experiment(self.session, self.repo, outcome, run_dir, self.out)
        index.add(self.repo, self.session, outcome.row)
        self._done(judged)
        self.out(outcome.row.status.verdict_line)
        return outcome.row.status.exit_code

    def _verb_recorded(self, kind: str, run_dir: Path, code: int, judged: Judged) -> int:
        if code == 0:
            apply.verb(self.session, self.repo, kind, run_dir)
        self._done(judged)
        if self.judging.judge_line:
            self.out(self.judging.judge_line)
        return code

    def _refused(self, code: int, judged: Judged) -> int:
        """The judge refused or the harness failed in it: nothing recorded, HEAD as it was."""
        self._done(judged)
        self.out(self.judging.judge_line or f"REFUSED: the judge exited {code} without an outcome (its output is in "
                                            f"{self.paths.run(judged.dispatch.run_id) / 'judge.log'})")
        return code or EXIT_REFUSED

    def _done(self, judged: Judged) -> None:
        if judged.judge is not None:
            judged.judge.release()
        dispatch_file.clear(self.paths)
