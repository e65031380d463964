"""Every write of a finished run, in one place: the run record, the ledger row and the best commit.

Order matters for crash safety: the run folder first (nothing points at it yet), then the ledger row
(append-only), then the best ref (recoverable), best.json and the best worktree. A baseline's run record
is its run folder's copy of baseline.json and the lane's baseline folder (summary, manifest, its git copy,
then session.json's pointer to it, the one write that makes the new baseline current); the ledger row and
the best follow in the same order. tests/unit/test_records.py holds both paths to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import git

from dit_ar_contract.classes import MILDEST
from dit_ar_contract.digest import sha256_file
from dit_ar_contract.errors import Refused
from dit_ar_contract.sides import Role
from dit_ar_contract.status import Status

from . import backup, gitops, integrity, ledger
from .baseline import BASELINE_RECORD, BaselineSummary
from .best import BestRecord, Measurements, read_best
from .files import read_json, write_json_atomic, write_record
from .ledger import LedgerRow
from .paths import now
from .roles import Rewind, record_rewind
from .runs import RunPaths, read_timing
from .session import LaneBaseline, Session, SessionRecord
from .writer import refuse_in_judge


def record_experiment(session: Session, repo: git.Repo, row: LedgerRow, run_dir: Path, reasons: list[str],
                      duration_s: float, measurements: Measurements | None = None,
                      details: dict[str, Any] | None = None) -> None:
    """The run record, the ledger row and, for a keep, the new best."""
    record = {**row.as_dict(), "reasons": reasons, "duration_s": duration_s, **(details or {})}
    write_record(RunPaths(run_dir).experiment, record)
    ledger.append(session.paths.ledger, row)
    if row.status is Status.KEEP:
        set_best(session, repo, row.commit, row.run_id, measurements or Measurements(), row.effective_class)


def set_best(session: Session, repo: git.Repo, commit: str, run_id: str, measurements: Measurements,
             effective_class: str = MILDEST.word) -> BestRecord:
    """Make `commit` the lane's best: ref first (recoverable), then best.json, then the worktree."""
    refuse_in_judge(f"the best of lane {session.lane_id}")
    tag = session.started.tag
    ref = gitops.best_ref(tag, session.lane_id)
    gitops.set_ref(repo, ref, commit)
    records = read_best(session.paths)
    previous = records.get(session.lane_id)
    best = BestRecord(commit=commit, tag=tag, branch=gitops.branch_name(tag), run_id=run_id, updated=now(),
                      ref=ref, measurements=measurements, effective_class=effective_class,
                      history=(previous.history if previous else ()) + (commit,))
    data = read_json(session.paths.best, {}) or {}
    data[session.lane_id] = best.as_dict()
    write_json_atomic(session.paths.best, data)
    gitops.sync_worktree(repo, session.paths.best_worktree, commit)
    return best


def record_baseline(session: Session, repo: git.Repo, summary: BaselineSummary, row: LedgerRow,
                    run_dir: Path) -> SessionRecord:
    """The run's baseline.json, the lane's baseline folder (summary, manifest, git copy), session.json's
    pointer to it, then the ledger row and the best."""
    write_record(RunPaths(run_dir).baseline, summary.as_dict())
    folder = session.baseline_dir
    write_record(folder / BASELINE_RECORD, summary.as_dict())
    manifest = {"lane_id": session.lane_id, "commit": summary.commit, "files": integrity.manifest_of(folder)}
    write_json_atomic(folder / integrity.MANIFEST, manifest)
    backup.save_folder(repo, folder, gitops.baseline_ref(session.started.tag, session.lane_id),
                       f"dit-ar baseline of {session.lane_id} at {summary.commit[:10]}")
    pointer = LaneBaseline(sha256_file(folder / integrity.MANIFEST), summary.commit, summary.run_id)
    record = session.started.with_baseline(session.lane_id, pointer)
    write_session(session, record)
    ledger.append(session.paths.ledger, row)
    timing = summary.timing
    set_best(session, repo, summary.commit, summary.run_id, Measurements(timing.median_ms, timing.p95_ms))
    return record


def write_session(session: Session, record: SessionRecord) -> None:
    write_json_atomic(session.paths.session, record.as_dict())
    session.record = record


def rewind_best(session: Session, repo: git.Repo, before: str) -> Rewind:
    """Move the lane's best back to the best before the keep `before` (a commit of its history after the baseline):
    the ref, best.json (its record as that keep's row and timing give it, the history cut there), the worktree and
    the branch; the move is recorded in roles.json, which clears a role-dependence mark. The commits after it stay
    in git's reflog; the ledger keeps every row."""
    refuse_in_judge(f"the best of lane {session.lane_id}")
    best = read_best(session.paths).get(session.lane_id)
    history = best.history if best else ()
    matches = [i for i, commit in enumerate(history) if commit.startswith(before)] if len(before) >= 7 else []
    if best is None or len(matches) != 1 or matches[0] == 0:
        kept = ", ".join(c[:10] for c in history[1:]) or "none"
        raise Refused(f"{before!r} is not one keep of lane {session.lane_id}'s best chain (its keeps: {kept}); "
                      "name one by 7 or more hex digits")
    gitops.require_branch(repo, session.started.tag)
    gitops.require_clean(repo)
    index = matches[0]
    target = history[index - 1]
    rows = [r for r in ledger.read(session.paths.ledger)
            if r.commit == target and r.lane == session.lane_id and r.status in (Status.KEEP, Status.BASELINE)]
    row = rows[-1] if rows else None
    timing = read_timing(session.root / row.run_dir) if row else None
    measured = Measurements(timing.median_ms(Role.CANDIDATE), timing.p95_ms(Role.CANDIDATE)) if timing \
        else Measurements()
    tag = session.started.tag
    ref = gitops.best_ref(tag, session.lane_id)
    gitops.set_ref(repo, ref, target)
    record = BestRecord(commit=target, tag=tag, branch=gitops.branch_name(tag), run_id=row.run_id if row else "",
                        updated=now(), ref=ref, measurements=measured,
                        effective_class=(row.effective_class if row and row.status is Status.KEEP else "")
                        or MILDEST.word, history=history[:index])
    data = read_json(session.paths.best, {}) or {}
    data[session.lane_id] = record.as_dict()
    write_json_atomic(session.paths.best, data)
    gitops.sync_worktree(repo, session.paths.best_worktree, target)
    gitops.reset_to(repo, target, session.config.mutable_paths)
    rewind = Rewind(history[index], best.commit, target, now())
    record_rewind(session.paths, session.lane_id, rewind)
    return rewind
