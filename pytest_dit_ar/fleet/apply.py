"""Recording what a fleet's judge handed back, in the session's own process, exactly once.

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

from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status

from ..loop import conclusion
from ..state import gitops, ledger, records
from ..state.best import Measurements
from ..state.files import read_json_object, write_json_atomic
from ..state.noise import NoiseProfile, record_spread, store_profile
from ..state.session import Session
from .dispatch import Dispatch
from .request import JudgeReply

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
