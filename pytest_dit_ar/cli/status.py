"""`dit-ar status` (read-only) and `dit-ar recover` (puts the branch and the baseline back)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

from dit_ar_contract.config import repo_root_for
from dit_ar_contract.device import DeviceIdentity
from dit_ar_contract.errors import ConfigError, Refused
from dit_ar_contract.status import Status

from ..loop.guards.frozen import touched
from ..report.summary import latest_revalidation, session_rows
from ..state import backup, gitops, ledger, runs
from ..state.baseline import BaselineSummary, manifest_problems
from ..state.best import BestRecord
from ..state.ledger import LedgerRow
from ..state.paths import STATE_DIR
from ..state.roles import refuse_if_marked
from ..state.runs import RunPaths
from ..state.session import Session, best_commit_config, open_session
from ..state.way_out import Unjudged, unjudged


def _head_relation(repo: git.Repo, head: str, best: str | None, config_path: Path) -> tuple[str, str | None]:
    """How HEAD relates to the recorded best, and the command that gets out when it is not the best."""
    if not best:
        return "no best recorded yet (run `dit-ar baseline`)", None
    if head == best:
        return "HEAD is the best", None
    if repo.is_ancestor(head, best):
        return (f"HEAD {head[:10]} is BEHIND the best {best[:10]} (an extra reset?)",
                "dit-ar recover   # or: git reset --hard " + best)
    if repo.is_ancestor(best, head):
        left = Unjudged(head, best, int(repo.git.rev_list("--count", f"{best}..{head}")))
        return unjudged_relation(left, config_path), f"to set it aside instead: {left.set_aside}"
    return f"HEAD {head[:10]} has diverged from the best {best[:10]}", "dit-ar recover"


def unjudged_relation(left: Unjudged, config_path: Path) -> str:
    """What `status` and `recover` say of commits on top of the best that no verdict judged."""
    if left.commits > 1:
        return (f"{left.commits} commits on top of the best, not judged: squash them into one "
                f"(`git reset --soft {left.best[:10]} && git commit`), then `dit-ar experiment`")
    touch = touched(config_path)
    if touch is not None:
        return (f"one candidate commit on top of the best, not judged; it changes frozen paths "
                f"{list(touch.outside[:5])}: `dit-ar experiment` discards it (DISCARD-SCOPE, reset to the best)")
    return "one candidate commit on top of the best, not judged yet: run `dit-ar experiment`"


SEEDS = ("seeds: each corpus case's seed is keyed by this session's secret (so a candidate cannot recognise the "
         "corpus), so a case's seed here is not the number in its id; `dit-ar case ID` writes its image and its seed")


@dataclass(frozen=True)
class Failure:
    """A recent discard or crash: its row and the first line of what went wrong."""

    row: LedgerRow
    detail: str

    def as_dict(self) -> dict[str, Any]:
        row = self.row
        return {"run_id": row.run_id, "status": row.status.word, "description": row.description,
                "detail": self.detail, "run_dir": row.run_dir}


@dataclass(frozen=True)
class SessionStatus:
    """What `dit-ar status` shows of one session (`as_dict` is its --json)."""

    tag: str | None
    branch: str | None
    lane: str
    lane_id: str
    device: DeviceIdentity
    head: str
    best: BestRecord | None
    best_ref: str | None
    head_relation: str
    fix: str | None
    baseline: BaselineSummary | None
    baseline_problems: list[str] | None  # None: no manifest (no baseline); []: intact
    rows: tuple[LedgerRow, ...]  # the lane's whole ledger
    recent: int
    revalidation: dict[str, Any] | None = None  # the latest re-validation's line and warning (report.summary)
    role_dependent: str | None = None  # the refusal while the best is marked role-dependent (state/roles.py)

    @property
    def counts(self) -> dict[str, int]:
        return {s.word: sum(r.status is s for r in self.rows) for s in Status}

    @property
    def recent_rows(self) -> tuple[LedgerRow, ...]:
        return self.rows[-self.recent:] if self.recent else ()

    @property
    def baseline_intact(self) -> bool:
        return self.baseline_problems == []

    def failures(self, root: Path) -> list[Failure]:
        out = []
        for row in [r for r in self.rows if r.status.is_failure][-5:]:
            detail = RunPaths(root / row.run_dir).crash_headline() if row.run_dir else None
            out.append(Failure(row, (detail or row.reason or row.quality_summary)[:300]))
        return out

    def as_dict(self, root: Path) -> dict[str, Any]:
        best, base = self.best, self.baseline
        timing = base.timing if base else None
        return {
            "tag": self.tag, "branch": self.branch, "lane": self.lane, "lane_id": self.lane_id,
            "device": self.device.as_dict(), "head": self.head,
            "best": {"commit": best.commit if best else None, "ref": self.best_ref,
                     "median_ms": best.measurements.median_ms if best else None,
                     "p95_ms": best.measurements.p95_ms if best else None},
            "head_relation": self.head_relation, "fix": self.fix,
            "baseline": {"present": self.baseline_problems is not None, "intact": self.baseline_intact,
                         "commit": base.commit if base else None, "task_metrics": base.task_metrics if base else None,
                         "envelope": base.envelope if base else None,
                         "median_ms": timing.median_ms if timing else None,
                         "noise_floor_pct": timing.noise_floor_pct if timing else None},
            "counts": self.counts, "recent": [r.as_dict() for r in self.recent_rows],
            "recent_failures": [f.as_dict() for f in self.failures(root)],
            "revalidation": self.revalidation, "role_dependent": self.role_dependent,
        }


def collect(session: Session, rows: int, config_path: Path | None = None) -> SessionStatus:
    repo = gitops.open_repo(session.root)
    head = gitops.head_sha(repo)
    best = session.best()
    record = session.record
    ref = gitops.read_ref(repo, gitops.best_ref(record.tag, session.lane_id)) if record else None
    relation, fix = _head_relation(repo, head, ref or (best.commit if best else None),
                                   config_path or session.config.path)
    lane_rows = tuple(r for r in ledger.read(session.paths.ledger) if r.lane == session.lane_id)
    return SessionStatus(
        tag=record.tag if record else None, branch=gitops.current_branch(repo), lane=session.lane.name,
        lane_id=session.lane_id, device=session.target.identity, head=head, best=best, best_ref=ref,
        head_relation=relation, fix=fix, baseline=runs.read_baseline(session.baseline_dir / runs.BASELINE_RECORD),
        baseline_problems=manifest_problems(session.baseline_dir), rows=lane_rows, recent=rows,
        revalidation=_revalidation(session, list(lane_rows)), role_dependent=_role_refusal(session))


def _role_refusal(session: Session) -> str | None:
    """Why every experiment is refused while the lane's best is marked role-dependent (None: it is not)."""
    try:
        refuse_if_marked(session.paths, session.lane_id)
    except Refused as exc:
        return str(exc)
    return None


def _revalidation(session: Session, rows: list[ledger.LedgerRow]) -> dict[str, Any] | None:
    """The lane's latest re-validation in this session: its line and, when the chain measured again disagrees
    with the product of its steps, the warning."""
    data = latest_revalidation(session.root, session_rows(rows, session.lane_id))
    return {"run_id": data.run_id, "headline": data.headline, "agree": data.agree,
            "warning": data.warning} if data else None


def _num(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _print(info: SessionStatus, root: Path) -> None:
    print(f"session {info.tag}  branch {info.branch}  lane {info.lane_id} on {info.device.name}")
    best = info.best
    median, p95 = (best.measurements.median_ms, best.measurements.p95_ms) if best else (None, None)
    print(f"best {str(best.commit if best else None)[:10]}  median {_num(median)} ms, p95 {_num(p95)} ms")
    print(f"HEAD {info.head[:10]}: {info.head_relation}")
    if info.fix:
        print(f"  way out: {info.fix}")
    base = info.baseline
    present = info.baseline_problems is not None
    state = "intact" if info.baseline_intact else ("DAMAGED — run `dit-ar recover`" if present else "missing")
    metrics = ", ".join(f"{k} {_num(v)}" for k, v in (base.task_metrics if base else {}).items()) or "none"
    timing = base.timing if base else None
    print(f"baseline {state}; task metrics {metrics}; median {_num(timing and timing.median_ms)} ms; "
          f"A/A noise {_num(timing and timing.noise_floor_pct, 3)}%")
    print(SEEDS)
    print("counts: " + ", ".join(f"{k}={v}" for k, v in info.counts.items()))
    reval = info.revalidation
    print(f"re-validation: {reval['headline']}" if reval else "re-validation: none yet (`dit-ar revalidate`)")
    if reval and reval.get("warning"):
        print(reval["warning"])
    if info.role_dependent:
        print(f"ROLE-DEPENDENT best: {info.role_dependent}")
    if info.recent_rows:
        print("recent (candidate: its median batch latency or images/s, the ledger's `candidate`; paired %: the "
              "verdict's paired estimate, the ledger's `improvement_pct`):")
        print(f"  {'time':<19}  {'status':<20} {'commit':<8}  {'candidate':>10}  {'paired %':>8}  description")
        for r in info.recent_rows:
            print(f"  {r.timestamp[:19]}  {r.status.word:<20} {r.commit[:8]}  {_num(r.candidate):>10}  "
                  f"{_num(r.improvement_pct, 3):>8}  {r.description[:60]}")
    failures = info.failures(root)
    if failures:
        print("recent failures:")
        for f in failures:
            print(f"  {f.row.run_id} {f.row.status.word}: {f.detail}  ({f.row.run_dir})")


def session_worktrees(config_path: Path) -> list[Path]:
    """The repository's git worktrees that may hold a research session (one session per worktree, e.g. one per
    GPU), the harness's own candidate and best worktrees left out."""
    repo = gitops.open_repo(repo_root_for(config_path))
    return [p for p in gitops.worktrees(repo) if STATE_DIR not in p.parts]


@dataclass(frozen=True)
class WorktreeStatus:
    """One worktree's session, or why it has no usable one."""

    worktree: Path
    status: SessionStatus | None = None
    problem: str | None = None

    def as_dict(self) -> dict[str, Any]:
        if self.status is None:
            return {"worktree": str(self.worktree), "problem": self.problem}
        return {"worktree": str(self.worktree), **self.status.as_dict(self.worktree)}


def everywhere(config_path: Path, rows: int) -> list[WorktreeStatus]:
    """`collect` for the session of every worktree (one command for sessions side by side)."""
    relative = Path(config_path).resolve().relative_to(repo_root_for(config_path))
    out = []
    for tree in session_worktrees(config_path):
        try:
            out.append(WorktreeStatus(tree, collect(open_session(tree / relative), rows)))
        except Refused as exc:  # no session there yet, or its lane cannot run on this machine
            out.append(WorktreeStatus(tree, problem=str(exc)))
    return out


def _print_all(infos: list[WorktreeStatus]) -> None:
    for info in infos:
        print(f"== {info.worktree}")
        if info.status is None:
            print(f"no usable session: {info.problem}")
        else:
            _print(info.status, info.worktree)


def status(config_path: Path, as_json: bool = False, rows: int = 10, every_worktree: bool = False) -> int:
    if every_worktree:
        infos = everywhere(config_path, rows)
        if as_json:
            print(json.dumps([i.as_dict() for i in infos], indent=2, default=str))
        else:
            _print_all(infos)
        return 0
    from ..fleet.route import settle

    settle(config_path)  # a fleet session: a judging a killed driver left is recorded first
    session, note = open_readable(config_path)
    info = collect(session, rows, config_path)
    from ..loop.speed.warm_servers import describe

    warm = describe(session.paths)  # the fork servers started for the next experiment, if any
    if as_json:
        print(json.dumps({**info.as_dict(session.root), "warm_servers": warm}, indent=2, default=str))
    else:
        if note:
            print(note)
        _print(info, session.root)
        if warm:
            print(warm)
    return 0


def rewind(config_path: Path, before: str) -> int:
    """`dit-ar recover --before COMMIT`: the best and the branch back to the best before that keep."""
    from ..loop.guards import gpu_locks
    from ..state.records import rewind_best

    session = open_session(config_path)
    lock = gpu_locks.hold_session_lock(session.paths, "recover when it has finished")
    try:
        moved = rewind_best(session, gitops.open_repo(session.root), before)
    finally:
        lock.release()
    print(f"the best of {session.lane_id} moved back from {moved.best_was[:10]} to {moved.best_now[:10]} (before the "
          f"keep of {moved.before[:10]}); the branch is there too, and the commits after it stay in `git reflog`")
    return 0


def recover(config_path: Path) -> int:
    """Reset the session branch to the recorded best (if HEAD fell behind) and restore a damaged baseline; in a
    fleet session, first record (or, its judge gone, clear as a harness error) a judging a killed driver left."""
    from ..fleet.route import settle

    settle(config_path)
    session, note = open_readable(config_path)
    if note:
        print(note)
    record = session.started
    repo = gitops.open_repo(session.root)
    gitops.require_clean(repo)
    ref = gitops.read_ref(repo, gitops.best_ref(record.tag, session.lane_id))
    head = gitops.head_sha(repo)
    if ref and head != ref:
        if not repo.is_ancestor(head, ref) and not repo.is_ancestor(ref, head):
            raise Refused(f"HEAD {head[:10]} has diverged from the best {ref[:10]}; inspect with `git log` first")
        if repo.is_ancestor(head, ref):
            gitops.require_branch(repo, record.tag)
            gitops.reset_to(repo, ref, session.config.mutable_paths)
            print(f"branch reset to the recorded best {ref[:10]}")
    folder = session.baseline_dir
    problems = manifest_problems(folder)
    damaged = problems is None or bool(problems)
    saved = gitops.read_ref(repo, gitops.baseline_ref(record.tag, session.lane_id))
    if damaged and saved:
        backup.restore_baseline(repo, folder, saved)
        print(f"baseline of {session.lane_id} restored from {gitops.baseline_ref(record.tag, session.lane_id)}")
    elif damaged:
        raise Refused(f"the baseline in {folder} is damaged and has no saved copy; start a new session")
    left = unjudged(session.root)
    if left is not None:  # a candidate no verdict judged is the user's work: named, never reset here
        print(f"HEAD {left.head[:10]}: {unjudged_relation(left, config_path)}; to set it aside instead: "
              f"{left.set_aside}")
    print("nothing else to recover" if not damaged else "recovered")
    return 0


def open_readable(config_path: Path) -> tuple[Session, str]:
    """The session, with the best commit's config where the working tree's does not load (a candidate commit may
    have broken it: `status` and `recover` still say where things are), and a note saying so."""
    try:
        return open_session(config_path), ""
    except ConfigError as exc:
        config = best_commit_config(config_path)
        if config is None:
            raise
        return open_session(config_path, config=config), (f"note: the working tree's config does not load ({exc}); "
                                                         "shown with the best commit's")
