"""Recording what a judging handed back, in the session's own process (the driver's second half): the judge's files
unpacked within the archive's caps, then the verdict (apply.py) or, for a judge lost after the candidate's code
started, the harness error that records nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import git

from dit_ar_contract.errors import EXIT_REFUSED, Refused

from ..loop import conclusion
from ..state.session import Session
from . import apply, archive, index
from . import dispatch as dispatch_file
from .judging import Judged, Judging
from .request import JudgeLost


class Recorder:
    """Records one session's judgings as they end (`record`); `ending` says why the last one left no verdict."""

    def __init__(self, session: Session, repo: git.Repo, judging: Judging, out: Callable[[str], None]):
        self.session, self.repo, self.judging, self.out = session, repo, judging, out
        self.paths = session.paths
        self.ending = ""  # why the judging in hand ended without a verdict (the claim's release says it)

    @property
    def gpus(self) -> int:
        return self.session.lane.gpus if self.session.lane.is_cuda else 0

    def record(self, judged: Judged) -> int:
        record, reply = judged.dispatch, judged.reply
        run_dir = self.paths.run(record.run_id)
        if judged.lost is not None or reply is None:  # lost after the candidate's code started
            return self._harness_error(judged, judged.lost or JudgeLost("judge-died", record.actor))
        try:
            self._unpack(judged)
        except JudgeLost as lost:  # gone while its files were fetched
            return self._harness_error(judged, lost)
        except Refused as exc:  # an archive over its caps, a member outside what it may return
            self.ending = f"refused: {str(exc)[:200]}"
            self._done(judged)
            raise
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

    def _unpack(self, judged: Judged) -> None:
        """The judge's archive, fetched to a file beside the session's state and checked against its caps before
        anything of it is written into the session (fleet/archive.py)."""
        record, reply, judge = judged.dispatch, judged.reply, judged.judge
        assert reply is not None and judge is not None
        allowed = archive.allowed_members(self.paths, record.kind, record.run_id, self.session.lane_id)
        with archive.spooled(self.paths.dir, judge.chunk, reply.archive_size) as path:
            archive.unpack(path, self.session.root, allowed)

    def _harness_error(self, judged: Judged, lost: JudgeLost) -> int:
        """The judge was lost after the candidate's code started: nothing recorded, HEAD kept, one line, exit 2."""
        record = judged.dispatch
        self.ending = f"harness error {lost.cause}"
        self._done(judged)
        self.out(f"REFUSED: harness error, the judge was lost: {lost} (run {record.run_id}, host {record.host or '?'}, "
                 f"slot {record.slot}); nothing was recorded against the candidate and HEAD was kept: `dit-ar fleet "
                 f"doctor` checks the nodes; run `dit-ar {record.kind}` again to judge it")
        return EXIT_REFUSED

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
