"""One experiment's git and state side: pre-run guards, post-run guards, the verdict, keep or reset.

Refusals (exit 2) change nothing in git or state. The verdict itself is `verdict.decide`; this module
gathers what it needs (scope problems, the crash, the quality and performance findings) and carries out
what it says.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import git
from filelock import FileLock

from dit_ar_contract.classes import MILDEST
from dit_ar_contract.config import load_config
from dit_ar_contract.errors import Refused
from dit_ar_contract.sides import Role

from ..state import gitops
from ..state.best import BestRecord, Measurements
from ..state.ledger import LedgerRow
from ..state.live import LiveFile
from ..state.paths import StatePaths, new_run_id
from ..state.phases import PhaseTimes
from ..state.session import Session, open_session, verify_integrity
from . import conclusion
from .conclusion import Candidate, ledger_row, performance_finding, quality_finding
from .evidence import Evidence
from .guards import gpu_locks, pregate
from .guards.checks import RunGuard, check_best, check_session, check_stack
from .guards.outcomes import TestOutcomes
from .quality import reuse
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
        self._best: BestRecord | None = None
        self.started = time.time()
        self.stack: dict[str, str | None] = {}
        self.pregate: list[pregate.Finding] = []  # the static pre-gate's findings over the diff (flags only)
        self.live: LiveFile | None = None  # live.json for `dit-ar watch`

    # -- before the run -------------------------------------------------------------------
    def acquire(self) -> None:
        """One experiment per repo at a time: a second one is refused, never interleaved."""
        self.lock = gpu_locks.hold_session_lock(StatePaths(load_config(self.config_path).root), "wait for it to "
                                                "finish (one experiment per repository and GPU at a time)")

    def release(self) -> None:
        if self.live is not None and not self.live.state.finished:  # refused, interrupted, the harness failed
            self.live.finish("NO VERDICT")
        gpu_locks.release(self.gpu_locks)
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def begin(self) -> Verdict | None:
        """Run every pre-run guard; refuse (raise Refused) or return a scope verdict, else None."""
        self.acquire()
        session = self.session = open_session(self.config_path, self.lane_name)
        self.gpu_locks = gpu_locks.acquire_lane(session.target)
        record = check_session(session)
        repo = self.repo = gitops.open_repo(session.root)
        gitops.require_branch(repo, record.tag)
        gitops.require_clean(repo)
        best = self._best = check_best(session, repo, record.tag)
        shape = gitops.candidate_commit(repo, best.commit)
        self.commit, self.parent = shape.sha, shape.parent
        self.pregate = pregate.scan_commit(repo, shape.parent, shape.sha,
                                           tuple(p for p in shape.changed
                                                 if gitops.under(p, session.config.mutable_paths)))
        run_dir = session.paths.run(self.preset_run_id or new_run_id(self.commit))
        evidence = Evidence(session, self.classification, run_dir, session.paths.best_worktree, prefetch_best=True,
                            candidate_root=session.paths.candidate_worktree if self.sandboxed else None,
                            sandboxed=self.sandboxed)
        self.stack = check_stack(evidence.baseline().environment)  # read and verified once, before candidate code runs
        evidence.check_metrics_available()
        self.run_id, self.run_dir = run_dir.name, run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.live = LiveFile.start(session.paths.live, "experiment", run_dir.name, self.commit, self.description,
                                   session.lane_id, seconds=self.seconds)
        ledger_bytes = session.paths.ledger.read_bytes() if session.paths.ledger.exists() else b""
        outside = gitops.out_of_scope(shape.changed, session.config.mutable_paths)
        if outside:  # judged before any candidate code runs: nothing else to find
            return self.conclude(decide([f"the commit changes paths outside {list(session.config.mutable_paths)}: "
                                         f"{outside}", way_back(self.commit)], None, None, None))
        problems = verify_integrity(session)
        if problems:
            raise Refused("fixed files differ from integrity.json before the run: " + "; ".join(problems[:5]))
        gitops.sync_worktree(repo, session.paths.best_worktree, best.commit)
        if self.sandboxed:
            gitops.sync_worktree(repo, session.paths.candidate_worktree, self.commit)
        evidence.workers.protect_best_cache()
        evidence.workers.refuse_unless_best_fits()  # one line, exit 2, before any candidate code runs
        worktrees = [session.paths.best_worktree] + ([session.paths.candidate_worktree] if self.sandboxed else [])
        self.guard = RunGuard(session, repo, self.commit, worktrees, ledger_bytes)
        self.evidence = evidence
        self.live.update(phase="quality", max_segments=session.lane.performance.max_segments)
        return None

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
        self.verdict, outcome = verdict, self.outcome(verdict)
        conclusion.settle(session, repo, outcome, self.run_dir, judge_only=self.judge_only)
        if outcome.keep and not self.judge_only:  # a fleet's judge leaves the best's stored outputs alone
            store_best_outputs(self.evidence, self._best)
        if self.live is not None:
            self.live.finish(verdict.status.verdict_word)
        return verdict

    def outcome(self, verdict: Verdict) -> conclusion.ExperimentOutcome:
        """What the verdict records (pure): the row, the reasons, the measurements and the run record's details."""
        perf = self.evidence.performance_result if self.evidence else None
        measurements = Measurements(perf.median_ms(Role.CANDIDATE), perf.p95_ms(Role.CANDIDATE)) if perf else None
        details = {"seconds": self.seconds(), **phase_record(self.evidence, self.seconds()), "software": self.stack,
                   "startup": perf.startup() if perf else None, "pregate": pregate.as_records(self.pregate)}
        return conclusion.ExperimentOutcome(self._row(verdict), tuple(verdict.reasons), time.time() - self.started,
                                            measurements, details,
                                            conclusion.spread_to_pool(perf) if self.judge_only else None)

    def seconds(self) -> dict[str, float]:
        """Where the experiment's wall time went: the evidence's phases, the rest, and the total."""
        phases = self.evidence.seconds if self.evidence else {}
        total = time.time() - self.started
        return {**phases, "harness_and_pytest": max(0.0, total - sum(phases.values())), "total": total}

    def _row(self, verdict: Verdict) -> LedgerRow:
        session = self.session
        assert session is not None and self.run_dir is not None
        flags = "; ".join(f for f in ("" if self.sandboxed else "unsandboxed", pregate.flag(self.pregate)) if f)
        who = Candidate(self.run_id, self.commit, self.parent, self.classification, self.description,
                        str(self.run_dir.relative_to(session.root)), flags)
        evidence = self.evidence
        return ledger_row(session, who, verdict, evidence.quality_result if evidence else None,
                          evidence.performance_result if evidence else None,
                          self._best.measurements.median_ms if self._best else None)


def phase_record(evidence: Evidence | None, spent: dict[str, float]) -> dict[str, Any]:
    """The run record's details from the evidence: `phases` (state/phases.py: the clock's seconds by phase, the
    warm-up count, what was reused), `reuse` (why the best's judging was or was not reused), `warm_servers` and
    `timed_quality` (the timed outputs judged on the task: state/timed_quality.py)."""
    timed = evidence.timed_quality if evidence else None
    return {"phases": phase_times(evidence, spent).as_dict(), "reuse": evidence.reuse.note if evidence else "",
            "warm_servers": evidence.workers.warm.note if evidence else "",
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


def way_back(commit: str) -> str:
    """How to get a reset commit back: it stays in git's object store and the reflog."""
    sha = commit[:10]
    return (f"the reset commit {sha} is still in git (`git reflog`): `git cherry-pick -n {sha}` puts its changes "
            f"back in the working tree (keep the model_under_test/ part, commit again), `git show {sha}` shows it, "
            f"`git reset --hard {sha}` returns the branch to it as it was")
