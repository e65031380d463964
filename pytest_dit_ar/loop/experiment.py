"""One experiment's git and state side: pre-run guards, post-run guards, the verdict, keep or reset.

Refusals (exit 2) change nothing in git or state. The verdict itself is `verdict.decide`; this module
gathers what it needs (scope problems, the crash, the quality and performance findings) and carries out
what it says.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import git
from filelock import FileLock

from dit_ar_contract.classes import MILDEST
from dit_ar_contract.config import repo_root_for
from dit_ar_contract.errors import Refused
from dit_ar_contract.sides import Role

from ..state import gitops
from ..state.best import BestRecord, Measurements
from ..state.ledger import LedgerRow
from ..state.live import LiveFile
from ..state.paths import StatePaths, new_run_id
from ..state.phases import PhaseTimes
from ..state.roles import RoleCheck
from ..state.runs import LogCutRecord, LogsRecord
from ..state.session import INTEGRITY_WAY_OUT, Session, open_session, verify_integrity
from . import conclusion
from .candidate import warm_note
from .conclusion import Candidate, ledger_row, performance_finding, quality_finding
from .evidence import Evidence
from .guards import frozen, gpu_locks, pregate
from .guards.checks import RunGuard, check_best, check_session, check_stack
from .guards.outcomes import TestOutcomes
from .quality import reuse
from .speed import role_check
from .verdict import Verdict, decide


class Experiment:
    """Guards and bookkeeping around one candidate commit."""

    def __init__(self, config_path: Path, lane: str | None, classification: str, description: str,
                 sandboxed: bool = True, judge_only: bool = False, run_id: str = ""):
        self.config_path, self.lane_name = config_path, lane
        self.classification, self.description = classification, description
        self.sandboxed = sandboxed
        # a fleet's judge: the outcome is written for the session's process (conclusion.py), under its driver's run id
        self.judge_only, self.preset_run_id = judge_only, run_id
        self.guard: RunGuard | None = None  # what the candidate may not change, snapshotted before it runs
        self.session: Session | None = None
        self.repo: git.Repo | None = None
        self.lock: FileLock | None = None
        self.gpu_locks: list[FileLock] = []
        self.commit = self.parent = self.run_id = ""
        self.run_dir: Path | None = None
        self.evidence: Evidence | None = None
        self.verdict: Verdict | None = None
        self.best: BestRecord | None = None  # the lane's best it is judged against
        self.started = time.time()
        self.stack: dict[str, str | None] = {}
        self.pregate: list[pregate.Finding] = []  # the static pre-gate's findings over the diff (flags only)
        self.live: LiveFile | None = None  # live.json for `dit-ar watch`
        self.role_check: RoleCheck | None = None  # the best's side-blind A/A, when this run did one

    # -- before the run -------------------------------------------------------------------
    def acquire(self) -> None:
        """One experiment per repo at a time: a second one is refused, never interleaved."""
        self.lock = gpu_locks.hold_session_lock(StatePaths(repo_root_for(self.config_path)), "wait for it to "
                                                "finish (one experiment per repository and GPU at a time)")

    def release(self) -> None:
        if self.live is not None and not self.live.state.finished:  # refused, interrupted, the harness failed
            self.live.finish("NO VERDICT")
        gpu_locks.release(self.gpu_locks)
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def begin(self, refusal: Refused | None = None) -> Verdict | None:
        """Run every pre-run guard; refuse (raise Refused) or return a scope verdict, else None. A commit that
        changes frozen paths is discarded first (guards/frozen.py), before `refusal` (what the collection found
        wrong with the config or corpus, which such a commit may have broken) or any other guard reads them."""
        self.acquire()
        touch = frozen.touched(self.config_path)
        if touch is not None:
            return self.discard_frozen(touch)
        if refusal is not None:
            raise refusal
        session = self.session = open_session(self.config_path, self.lane_name)
        self.gpu_locks = gpu_locks.acquire_lane(session.target)
        record = check_session(session)
        repo = self.repo = gitops.open_repo(session.root)
        gitops.require_branch(repo, record.tag)
        gitops.require_clean(repo)
        best = self.best = check_best(session, repo, record.tag)
        shape = gitops.candidate_commit(repo, best.commit)
        self.commit, self.parent = shape.sha, shape.parent
        self.pregate = pregate.scan_commit(repo, shape.parent, shape.sha,
                                           tuple(p for p in shape.changed
                                                 if gitops.under(p, session.config.mutable_paths)))
        run_dir = session.paths.run(self.preset_run_id or new_run_id(self.commit))
        evidence = Evidence(session, self.classification, run_dir, session.paths.best_worktree, prefetch_best=True,
                            candidate_root=session.paths.candidate_worktree if self.sandboxed else None,
                            sandboxed=self.sandboxed)
        evidence.workers.next.arm(session, self.config_path, judged=self.sandboxed and not self.judge_only)
        self.stack = check_stack(evidence.baseline().environment)  # read and verified once, before candidate code runs
        evidence.check_metrics_available()
        self.run_id, self.run_dir = run_dir.name, run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.live = LiveFile.start(session.paths.live, "experiment", run_dir.name, self.commit, self.description,
                                   session.lane_id, seconds=self.seconds)
        ledger_bytes = session.paths.ledger.read_bytes() if session.paths.ledger.exists() else b""
        outside = gitops.out_of_scope(shape.changed, session.config.mutable_paths)
        if outside:  # judged before any candidate code runs (frozen.touched finds this first where git has the config)
            return self.conclude(decide([f"the commit changes paths outside {list(session.config.mutable_paths)}: "
                                         f"{outside}"], None, None, None))
        problems = verify_integrity(session)
        if problems:
            raise Refused("fixed files differ from integrity.json before the run, and the commit did not change "
                          "them: " + "; ".join(problems[:5]), way_out=INTEGRITY_WAY_OUT)
        gitops.sync_worktree(repo, session.paths.best_worktree, best.commit)
        if self.sandboxed:
            gitops.sync_worktree(repo, session.paths.candidate_worktree, self.commit)
        evidence.workers.protect_best_cache()
        evidence.workers.refuse_unless_best_fits()  # one line, exit 2, before any candidate code runs
        worktrees = [session.paths.best_worktree] + ([session.paths.candidate_worktree] if self.sandboxed else [])
        self.guard = RunGuard(session, repo, self.commit, worktrees, ledger_bytes)
        self.evidence, evidence.clock.seconds["harness_before"] = evidence, time.time() - self.started  # the guards
        self.live.update(phase="quality", max_segments=session.lane.performance.max_segments)
        return None

    def discard_frozen(self, touch: frozen.FrozenTouch) -> Verdict:
        """DISCARD-SCOPE for a commit that changes frozen paths, recorded under the best commit's config before
        anything of the commit is read; the session's own refusals (HALT, another device) still come first."""
        session = self.session = open_session(self.config_path, self.lane_name, config=touch.config)
        check_session(session)
        self.repo, self.best = gitops.open_repo(session.root), session.best()
        self.commit, self.parent = touch.commit, touch.parent
        self.run_dir = session.paths.run(self.preset_run_id or new_run_id(self.commit))
        self.run_id = self.run_dir.name
        self.run_dir.mkdir(parents=True, exist_ok=True)
        return self.conclude(decide([touch.reason], None, None, None))

    # -- after the run (loop/guards/checks.py) ------------------------------------------------------
    def guard_before_refusal(self) -> Verdict | None:
        """Run the post-run checks before the run ends in a refusal (a harness error, an interruption): what
        the candidate changed is judged and recorded (DISCARD-SCOPE, HALT) whatever else went wrong; None
        when it changed nothing (the refusal stands)."""
        if self.evidence is None or self.verdict is not None or self.guard is None:
            return None
        damage = self.guard.problems()
        if not damage.problems:
            return None
        self.guard.repair(damage)
        return self.conclude(decide(damage.problems, None, None, None))

    def judge(self, outcomes: TestOutcomes) -> Verdict:
        """The verdict from the post-run guards, the evidence and the tests' outcomes."""
        evidence = self.evidence
        assert evidence is not None
        if self.live is not None:
            self.live.phase("judging")
        crash = evidence.crash
        assert self.guard is not None
        damage = self.guard.problems()
        self.guard.repair(damage)
        found = quality_finding(outcomes, evidence.quality_result, evidence.performance_result, evidence.timed_quality)
        return decide(damage.problems, str(crash) if crash else None, found,
                      performance_finding(outcomes, evidence.performance_result))

    def conclude(self, verdict: Verdict) -> Verdict:
        """Write the run record and the ledger row, then keep (move best) or reset to the explicit parent; a
        fleet's judge writes the outcome into the run folder for its session's process instead."""
        session, repo = self.session, self.repo
        assert session is not None and repo is not None and self.run_dir is not None
        self.verdict, outcome = verdict, outcome_of(self, verdict)
        conclusion.settle(session, repo, outcome, self.run_dir, judge_only=self.judge_only)
        if outcome.keep and not self.judge_only:  # a fleet's judge leaves the best's stored outputs alone
            store_best_outputs(self.evidence, self.best)
        if self.live is not None:
            self.live.finish(verdict.status.verdict_word)
        return verdict

    def seconds(self) -> dict[str, float]:
        """Where the experiment's wall time went: the evidence's phases, the rest, and the total."""
        phases = self.evidence.seconds if self.evidence else {}
        total = time.time() - self.started
        return {**phases, "harness_and_pytest": max(0.0, total - sum(phases.values())), "total": total}


def conclude_timed(exp: Experiment, outcomes: TestOutcomes) -> Verdict:
    """The post-run guards and the verdict, recorded; the guards' time on the evidence's clock, in the `harness`
    phase (state/phases.py)."""
    assert exp.evidence is not None
    since = time.perf_counter()
    judged = exp.judge(outcomes)
    exp.evidence.clock.spent("harness_after", since)
    return exp.conclude(judged)


def check_roles(exp: Experiment) -> None:
    """The best's side-blind A/A when this run calls for it; a role-dependent best is a refusal
    (role_check.after_timing). A fleet's judge leaves it to the session's own runs."""
    ev = exp.evidence
    if ev is not None and exp.session is not None and exp.run_dir is not None and not exp.judge_only:
        since = time.perf_counter()
        exp.role_check = role_check.after_timing(exp.session, ev.launcher, exp.run_dir,
                                                 None if ev.crash else ev.performance_result, exp.best,
                                                 exp.live.phase if exp.live else None)
        ev.clock.spent("role_check", since)  # the `harness` phase (state/phases.py)


def outcome_of(exp: Experiment, verdict: Verdict) -> conclusion.ExperimentOutcome:
    """What the verdict records (pure): the row, the reasons, the measurements and the run record's details."""
    perf = exp.evidence.performance_result if exp.evidence else None
    measurements = Measurements(perf.median_ms(Role.CANDIDATE), perf.p95_ms(Role.CANDIDATE)) if perf else None
    return conclusion.ExperimentOutcome(row_of(exp, verdict), tuple(verdict.reasons), time.time() - exp.started,
                                        measurements, run_details(exp),
                                        conclusion.spread_to_pool(perf) if exp.judge_only else None)


def row_of(exp: Experiment, verdict: Verdict) -> LedgerRow:
    """The experiment's ledger row for `verdict`."""
    session = exp.session
    assert session is not None and exp.run_dir is not None
    flags = "; ".join(f for f in ("" if exp.sandboxed else "unsandboxed", pregate.flag(exp.pregate)) if f)
    who = Candidate(exp.run_id, exp.commit, exp.parent, exp.classification, exp.description,
                    str(exp.run_dir.relative_to(session.root)), flags)
    evidence = exp.evidence
    best = exp.best
    return ledger_row(session, who, verdict, evidence.quality_result if evidence else None,
                      evidence.performance_result if evidence else None,
                      best.measurements.median_ms if best else None)


def run_details(exp: Experiment) -> dict[str, Any]:
    """The run record's details beside the row: where the time went, the software, the start-up, the pre-gate's
    findings, the warm servers, the worker logs cut at their cap, the best's side-blind A/A."""
    perf = exp.evidence.performance_result if exp.evidence else None
    return {"seconds": exp.seconds(), **phase_record(exp.evidence, exp.seconds()), "software": exp.stack,
            "startup": perf.startup() if perf else None, "pregate": pregate.as_records(exp.pregate),
            "warm_servers": warm_note(exp.evidence.workers) if exp.evidence else "", "logs": logs_record(exp.evidence),
            "role_check": dataclasses.asdict(exp.role_check) if exp.role_check else None}


def logs_line(evidence: Evidence | None) -> str | None:
    """The summary's line when a worker's log was cut at its cap."""
    return LogsRecord.from_dict(logs_record(evidence)).line() if evidence else None


def logs_record(evidence: Evidence | None) -> dict[str, Any]:
    """The run record's `logs`: the cap of each worker's log and the logs cut at it (worker/log_relay.py)."""
    if evidence is None:
        return LogsRecord().as_dict()
    book = evidence.launcher.logs
    cut = tuple(LogCutRecord(c.name, c.dropped_bytes) for c in book.cut())
    return LogsRecord(book.cap_bytes / 2**20, cut).as_dict()


def phase_record(evidence: Evidence | None, spent: dict[str, float]) -> dict[str, Any]:
    """The run record's details from the evidence: `phases` (state/phases.py: the clock's seconds by phase, the
    warm-up count, what was reused), `reuse` (why the best's judging was or was not reused), `warm_servers` and
    `timed_quality` (the timed outputs judged on the task: state/timed_quality.py)."""
    timed = evidence.timed_quality if evidence else None
    return {"phases": phase_times(evidence, spent).as_dict(), "reuse": evidence.reuse.note if evidence else "",
            "warm_servers": warm_note(evidence.workers) if evidence else "",
            "timed_quality": timed.as_dict() if timed else None}


def phase_times(evidence: Evidence | None, spent: dict[str, float]) -> PhaseTimes:
    perf = evidence.performance_result if evidence else None
    rounds = sum(len(s.warmup_s.candidate) + len(s.warmup_s.best) for s in perf.segments) if perf else 0
    return PhaseTimes.from_clock(spent, spent["total"], rounds,
                                 evidence.workers.warmup_reused if evidence and perf else 0,
                                 bool(evidence and evidence.reuse.assessment is not None))


def store_best_outputs(evidence: Evidence | None, before: BestRecord | None) -> None:
    """A keep's corpus outputs and judging become the best's stored ones (loop/quality/reuse.py); a failure to store
    costs only the reuse."""
    if evidence is None or evidence.quality_result is None or not reuse.enabled(evidence.session):
        return
    try:
        reuse.store_kept(evidence.session, evidence.launcher.tree_digest(evidence.candidate_root),
                         evidence.candidate(), evidence.quality_result,
                         before.effective_class if before else MILDEST.word)
    except (OSError, RuntimeError) as exc:
        evidence.reuse.note = f"the best's outputs were not stored ({exc})"


def way_back(commit: str, mutable: tuple[str, ...] = ("model_under_test/",)) -> str:
    """How to get a reset commit's changes back: it stays in git's object store and the reflog."""
    sha = commit[:10]
    return (f"your commit {sha} stays in `git reflog`: `git cherry-pick -n {sha}` brings its changes back into the "
            f"working tree (commit the {', '.join(mutable)} part again), `git show {sha}` shows it")
