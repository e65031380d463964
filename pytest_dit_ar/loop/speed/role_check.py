"""The side-blind A/A of the best: its tree in the candidate's role against itself in the best's role.

No worker can tell its side (docs/design/sandbox-and-security.md lists every channel and how it is closed). This is
the backstop for a channel missed: a best whose code slows itself whenever it is the best (and so lets no-op commits
be kept as wins) is slower in the best's role than in the candidate's, and an A/A of it in both roles shows it.

When: at `dit-ar revalidate`; in an experiment whose timing found the best significantly slower as the best than
its candidate side was in the run that kept it (the same lane and device, unflagged rounds only:
perf_suite/shift.py); and in a share `performance.role_check_fraction` of experiments, drawn from the harness's own
secret randomness (`secrets`), which nothing in a sandbox can read.

How: the experiment's own measurement (`measure`: fresh pairs, forked from each role's fork servers when the lane
forks, the sequential test with the session's offset bound), with the best's commit checked out a second time
(`worktrees/role-check`) for the candidate's role and the best's worktree for the best's role, worker logs under
`role-check-N/` of the run folder, guardrails off (it measures). A difference is a look that keeps (the candidate's
role faster by the verdict's own rule) or whose interval lies wholly below zero by at least the lane's
`min_improvement_pct` (the best's role faster); a first difference is timed again in fresh pairs, and only a
second one in the same direction marks the best role-dependent (state/roles.py), so a false mark needs two false
differences in a row.
"""

from __future__ import annotations

import dataclasses
import random
import secrets
from collections.abc import Callable
from pathlib import Path

from dit_ar_contract.config import Guardrails, PerfProtocol
from dit_ar_contract.errors import Refused
from dit_ar_contract.sides import Role
from dit_ar_contract.status import Status
from perf_suite.sequential import DECISIONS, KEEP, Look
from perf_suite.shift import shift
from quality_suite.corpora import load_corpus

from ...state import gitops, ledger
from ...state.best import BestRecord
from ...state.files import write_json_atomic
from ...state.ledger import LedgerRow
from ...state.paths import now
from ...state.perf_record import PerfRecord
from ...state.roles import LaneRoles, RoleCheck, RoleFinding, read_roles, record_check
from ...state.runs import RunPaths, read_timing
from ...state.session import Session
from ...worker.client import WorkerLauncher
from ...worker.forkserver import ForkServers
from .measurement import measure
from .measurement_plan import MeasurementPlan, Side
from .timing import offset_bound

ROLE_WORKTREE = "role-check"  # under the state folder's worktrees/: the best's commit, timed in the candidate's role
CHECK_RECORD = "role-check.json"
DRAW = secrets.SystemRandom()


def clean_times(perf: PerfRecord, role: Role) -> list[float]:
    """A side's timed rounds whose clocks did not fall and that nothing flagged (all of them on CPU lanes)."""
    times: list[float] = []
    for seg in perf.segments:
        if not seg.rounds:
            times += seg.times[role]
            continue
        times += [t for r in seg.rounds if not r.flagged and not r.excluded
                  and (t := r.sides[role].seconds) is not None]
    return times


def slower_as_best(then: PerfRecord | None, perf: PerfRecord, protocol: PerfProtocol, keep_run: str) -> str | None:
    """Why to check now, when this run (`perf`) timed the best significantly slower (by twice the lane's minimum
    improvement, one-sided Mann-Whitney at its alpha) than its candidate side ran in `then`, the run that made it
    the best; None otherwise, or without that run's timing."""
    if then is None:
        return None
    found = shift(clean_times(then, Role.CANDIDATE), clean_times(perf, Role.BEST))
    if found is None or not found.slower(2 * protocol.min_improvement_pct, protocol.alpha):
        return None
    return f"the best ran {found.describe()} slower as the best than as the candidate in run {keep_run}, which kept it"


def reason_to_check(protocol: PerfProtocol, then: PerfRecord | None, perf: PerfRecord | None, keep_run: str,
                    draw: random.Random = DRAW) -> str | None:
    """Why this experiment times the best against itself (None: it does not): the best slower as the best than
    as its candidate, else the lane's share of experiments, drawn."""
    if perf is None or perf.look is None:
        return None
    slower = slower_as_best(then, perf, protocol, keep_run)
    if slower is not None:
        return slower
    fraction = protocol.role_check_fraction
    return f"drawn for {fraction:.0%} of experiments" if draw.random() < fraction else None


def difference(look: Look | None, min_improvement_pct: float) -> int:
    """+1: the candidate's role faster by the verdict's rule; -1: the best's role faster, its interval wholly below
    zero by at least the minimum improvement; 0: no difference found."""
    if look is None:
        return 0
    if look.decision == DECISIONS[KEEP]:
        return 1
    if look.upper_pct < 0 and -look.estimate_pct >= min_improvement_pct:
        return -1
    return 0


def aa_plan(session: Session, launcher: WorkerLauncher, cand_root: Path, best_root: Path,
            log_dir: Path) -> MeasurementPlan:
    lane = session.lane
    spec = lambda root: lane.workload(launcher.model_root(root), session.root)  # noqa: E731
    return MeasurementPlan(cand=Side(Role.CANDIDATE.label, cand_root, spec(cand_root)),
                           best=Side(Role.BEST.label, best_root, spec(best_root)), protocol=lane.performance,
                           prompts=tuple(c.prompt for c in load_corpus(session.root / lane.corpus)), batch=lane.batch,
                           metric=lane.primary_metric, guardrails=Guardrails(memory_growth_pct=None,
                                                                             startup_growth_pct=None),
                           is_cuda=lane.is_cuda, log_dir=log_dir, resolution=lane.resolution,
                           bound=offset_bound(session))


def one_aa(session: Session, launcher: WorkerLauncher, cand_root: Path, best_root: Path, log_dir: Path) -> PerfRecord:
    """One A/A, timed as an experiment times its pairs (fork servers per role when the lane forks)."""
    plan = aa_plan(session, launcher, cand_root, best_root, log_dir)
    p = session.lane.performance
    forks = ForkServers(launcher, cand_root, best_root, log_dir, p.fork_servers(session.lane.is_cuda)).spawn() \
        if p.fork_server else None
    try:
        perf = measure(plan, launcher, forks=forks)
    finally:
        if forks is not None:
            forks.close()
    write_json_atomic(RunPaths(log_dir).perf, perf.to_dict())
    return perf


def run_check(session: Session, launcher: WorkerLauncher, run_dir: Path, commit: str, why: str) -> RoleCheck:
    """Time `commit` against itself in both roles (twice when the first A/A finds a difference)."""
    paths = session.paths
    repo = gitops.open_repo(session.root)
    cand_root = paths.dir / "worktrees" / ROLE_WORKTREE
    gitops.sync_worktree(repo, cand_root, commit)
    gitops.sync_worktree(repo, paths.best_worktree, commit)
    min_pct = session.lane.performance.min_improvement_pct
    found, segments, look = [], 0, None
    for attempt in (1, 2):
        perf = one_aa(session, launcher, cand_root, paths.best_worktree, run_dir / f"role-check-{attempt}")
        segments += len(perf.segments)
        look = perf.look
        found.append(difference(look, min_pct))
        if found[-1] == 0:
            break
    est = (look.estimate_pct, look.lower_pct, look.upper_pct) if look else (None, None, None)
    check = RoleCheck(run_dir.name, commit, why, now(), *est, segments, len(found),
                      len(found) == 2 and found[0] == found[1] != 0)
    write_json_atomic(run_dir / CHECK_RECORD, dataclasses.asdict(check))
    return check


def finding_for(history: tuple[str, ...], roles: LaneRoles, rows: list[LedgerRow], check: RoleCheck,
                run_id: str) -> RoleFinding:
    """Who introduced the role dependence of the best (the last commit of `history`, the baseline first): the
    first keep since the last best that passed a check (since the baseline when none did); the way back is the
    best before it. `rows`: the lane's ledger (the keep's run id); `run_id`: the best's own run."""
    passed = [i for i, commit in enumerate(history[:-1]) if roles.passed(commit)]
    start = passed[-1] + 1 if passed else 1
    if start >= len(history):  # the baseline is the best: there is no way back
        return RoleFinding(check, history[0], run_id, "")
    introduced = history[start]
    keeps = [r.run_id for r in rows if r.commit == introduced and r.status is Status.KEEP]
    return RoleFinding(check, introduced, keeps[-1] if keeps else "", history[start - 1])


def judge_best(session: Session, launcher: WorkerLauncher, run_dir: Path, best: BestRecord, why: str) -> RoleCheck:
    """Run the check on the lane's best and record it (with the mark, when it is role-dependent)."""
    check = run_check(session, launcher, run_dir, best.commit, why)
    finding = None
    if check.role_dependent:
        rows = [r for r in ledger.read(session.paths.ledger) if r.lane == session.lane_id]
        finding = finding_for(best.history or (best.commit,), read_roles(session.paths, session.lane_id), rows, check,
                              best.run_id)
    record_check(session.paths, session.lane_id, check, finding)
    return check


def after_timing(session: Session, launcher: WorkerLauncher, run_dir: Path, perf: PerfRecord | None,
                 best: BestRecord | None, phase: Callable[[str], None] | None = None) -> RoleCheck | None:
    """An experiment's check after its timing (`reason_to_check`), recorded; a role-dependent best is refused: the
    refusal names the keep that introduced it and the way back, and nothing is judged against it."""
    if best is None:
        return None
    why = reason_to_check(session.lane.performance, read_timing(session.paths.run(best.run_id)), perf, best.run_id)
    if why is None:
        return None
    if phase is not None:
        phase("the best against itself, side-blind")
    check = judge_best(session, launcher, run_dir, best, why)
    finding = read_roles(session.paths, session.lane_id).finding
    if check.role_dependent and finding is not None:
        raise Refused(finding.refusal(), way_out=finding.way_out())
    return check
