"""Recording what a fleet's judge handed back, in the session's own process, exactly once.

`Recorder.record` takes a judging as it ends: the judge's files unpacked within the archive's caps (archive.py),
then the verdict; or, for a judge lost after the candidate's code started, the harness error that records nothing
(one `REFUSED: harness error` line, exit 2).

A run id already in the ledger is not recorded again: a driver killed after the ledger row (or a successor that
re-attached) only finishes what is left (a keep's best, a discard's reset). The branch is reset only while HEAD
is still the judged commit; work committed on top of it meanwhile is left as it is, and said so.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import git

from dit_ar_contract.errors import EXIT_REFUSED, Refused
from dit_ar_contract.status import Status

from ..loop import conclusion
from ..state import gitops, ledger, records
from ..state.best import Measurements
from ..state.files import read_json_object, write_json_atomic
from ..state.noise import NoiseProfile, record_spread, store_profile
from ..state.session import Session
from . import archive, index
from . import dispatch as dispatch_file
from .dispatch import Dispatch
from .judging import Judged, Judging
from .request import JudgeLost, JudgeReply

PROVENANCE = "fleet.json"  # in each run folder: where and how long the judging ran (GPU-seconds, attempt)


def provenance(dispatch: Dispatch, reply: JudgeReply | None, gpus: int) -> dict[str, Any]:
    """Where a judging ran and for how long it held its slot (`dit-ar fleet status` sums the GPU-seconds)."""
    placement = reply.placement if reply else None
    held = reply.held_s if reply else max(0.0, time.time() - dispatch.started)
    return {"slot": dispatch.slot, "attempt": dispatch.attempt, "node": placement.node_id if placement else
            dispatch.node, "host": placement.host if placement else dispatch.host,
            "gpu_ids": list(placement.gpu_ids) if placement else [], "gpus": gpus, "held_s": held,
            "gpu_seconds": held * max(gpus, 0), "seconds": reply.seconds if reply else {},
            "driver_host": platform.node()}


def recorded_row(session: Session, run_id: str) -> ledger.LedgerRow | None:
    return next((r for r in ledger.read(session.paths.ledger) if r.run_id == run_id), None)


def recorded(session: Session, run_id: str) -> bool:
    return recorded_row(session, run_id) is not None


def experiment(session: Session, repo: git.Repo, outcome: conclusion.ExperimentOutcome, run_dir: Path,
               out: Callable[[str], None]) -> None:
    """Record an experiment's outcome once: the row, then a keep's best or a discard's reset."""
    row = outcome.row
    if recorded(session, row.run_id):
        finish(session, repo, row, out)
        return
    if outcome.spread is not None:
        record_spread(session.paths, session.lane_id, row.parent, row.run_id, outcome.spread)
    records.record_experiment(session, repo, row, run_dir, list(outcome.reasons), outcome.duration_s,
                              outcome.measurements, outcome.details)
    if not outcome.keep:
        _reset(session, repo, row, out)


def finish(session: Session, repo: git.Repo, row: ledger.LedgerRow, out: Callable[[str], None]) -> None:
    """What is left of a recorded row when its driver died after writing it: a keep's best, a discard's reset."""
    if row.status is Status.KEEP:
        if gitops.read_ref(repo, gitops.best_ref(session.started.tag, session.lane_id)) != row.commit:
            median = row.candidate if row.metric == "latency_ms" else None  # the row's median batch latency
            records.set_best(session, repo, row.commit, row.run_id, Measurements(median), row.effective_class)
        return
    _reset(session, repo, row, out)


def _reset(session: Session, repo: git.Repo, row: ledger.LedgerRow, out: Callable[[str], None]) -> None:
    """Back to the row's parent while HEAD is still the judged commit."""
    head = gitops.head_sha(repo)
    if head == row.commit:
        conclusion.reset(session, repo, row.parent)
    elif repo.is_ancestor(row.commit, head):
        out(f"dit-ar: HEAD moved past the judged commit {row.commit[:10]} while it was judged; the branch is left as "
            f"it is: `git rebase --onto {row.parent[:10]} {row.commit[:10]}` drops the discarded commit")


def baseline(session: Session, repo: git.Repo, run_dir: Path) -> None:
    """Record a baseline taken in the slot: its folder is in place; summary, manifest, session, ledger, best."""
    outcome = conclusion.read_baseline(run_dir)
    if outcome is None:
        raise Refused(f"the judge's baseline left no {conclusion.BASELINE_OUTCOME} in {run_dir}")
    record = session.started
    if outcome.summary.lane_id != session.lane_id or outcome.summary.commit != record.baseline_commit:
        raise Refused(f"the judge's baseline is of {outcome.summary.lane_id} at {outcome.summary.commit[:10]}, not of "
                      f"this session's {session.lane_id} at {record.baseline_commit[:10]}; nothing recorded")
    if not recorded(session, outcome.row.run_id):
        records.record_baseline(session, repo, outcome.summary, outcome.row, run_dir)


def revalidation(session: Session, run_dir: Path) -> None:
    """Record a re-validation judged in the slot: its row (it never moves the best)."""
    data = read_json_object(run_dir / conclusion.ROW)
    if not data:
        raise Refused(f"the judge's re-validation left no {conclusion.ROW} in {run_dir}")
    row = ledger.LedgerRow.from_dict(data)
    if row.status is not Status.REVALIDATE:
        raise Refused(f"{run_dir / conclusion.ROW} is a {row.status.word} row, not a re-validation's")
    if not recorded(session, row.run_id):
        ledger.append(session.paths.ledger, row)


def calibration(session: Session, profile_path: Path) -> NoiseProfile:
    """Store a calibration measured in the slot as the lane's prior."""
    data = read_json_object(profile_path)
    if not data:
        raise Refused(f"the judge's calibration left no profile in {profile_path}")
    profile = NoiseProfile.from_dict(data)
    if profile.lane_id != session.lane_id:
        raise Refused(f"the judge's calibration is of lane {profile.lane_id}, not {session.lane_id}")
    store_profile(session.paths, profile)
    return profile


def verb(session: Session, repo: git.Repo, kind: str, run_dir: Path) -> None:
    """Record what a baseline, a re-validation or a calibration judged in the slot returned."""
    if kind == "baseline":
        baseline(session, repo, run_dir)
    elif kind == "revalidation":
        revalidation(session, run_dir)
    elif kind == "calibration":
        calibration(session, session.paths.dir / f"calibration-{session.lane_id}.profile.json")


def note_provenance(run_dir: Path, data: dict[str, Any]) -> None:
    write_json_atomic(run_dir / PROVENANCE, data)


def with_attempt(outcome: conclusion.ExperimentOutcome, dispatch: Dispatch,
                 data: dict[str, Any]) -> conclusion.ExperimentOutcome:
    """The outcome with where it ran, and `attempt 2` in its flags when the first judge was lost before it ran."""
    return outcome.with_provenance(f"attempt {dispatch.attempt}" if dispatch.attempt > 1 else "", {"fleet": data})


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
        where = provenance(record, reply, self.gpus)
        note_provenance(run_dir, where)
        if reply.halt:  # what the run changed on the node that the harness relies on: this session halts
            where = reply.placement
            self.paths.halt.write_text(f"on {where.host} (node {where.node_id[:12]}):\n{reply.halt}")
        if record.kind == "experiment":
            outcome = conclusion.read(run_dir)
            if outcome is not None:
                return self._experiment_recorded(with_attempt(outcome, record, where), run_dir, judged)
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
        experiment(self.session, self.repo, outcome, run_dir, self.out)
        index.add(self.repo, self.session, outcome.row)
        self._done(judged)
        self.out(outcome.row.status.verdict_line)
        return outcome.row.status.exit_code

    def _verb_recorded(self, kind: str, run_dir: Path, code: int, judged: Judged) -> int:
        if code == 0:
            verb(self.session, self.repo, kind, run_dir)
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
