"""One experiment's git and state side: pre-run guards, post-run guards, the verdict, keep or reset.

Refusals (exit 2) change nothing in git or state. The verdict itself is `verdict.decide`; this module
gathers what it needs (scope problems, the crash, the quality and performance findings) and carries out
what it says.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import git
from filelock import FileLock, Timeout

from dit_ar_contract import versions
from dit_ar_contract.config import load_config
from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status

from ..state import gitops, records, tamper
from ..state.best import BestRecord, Measurements, require_best
from ..state.files import write_bytes_atomic
from ..state.ledger import LedgerRow
from ..state.live import LiveFile
from ..state.paths import StatePaths, new_run_id, now
from ..state.session import Session, open_session, verify_integrity
from . import gpu_locks, pregate
from .evidence import Evidence
from .outcomes import TestOutcomes
from .verdict import Finding, Verdict, decide


@dataclass(frozen=True)
class RunDamage:
    """What a run changed that a candidate may not (`post_run_problems`): the problems in words, the files to put
    back (path -> the bytes before the run) and the environment changes that halt further experiments."""

    problems: tuple[str, ...] = ()
    restore: dict[Path, bytes] = field(default_factory=dict)
    environment: tuple[str, ...] = ()


class Experiment:
    """Guards and bookkeeping around one candidate commit."""

    def __init__(self, config_path: Path, lane: str | None, classification: str, description: str,
                 sandboxed: bool = True):
        self.config_path, self.lane_name = config_path, lane
        self.classification, self.description = classification, description
        self.sandboxed = sandboxed
        self._fingerprint: dict[str, str] = {}
        self._state_bytes: dict[Path, bytes] = {}
        self.session: Session | None = None
        self.repo: git.Repo | None = None
        self.lock: FileLock | None = None
        self.gpu_locks: list[FileLock] = []
        self.commit = self.parent = ""
        self.run_id = ""
        self.run_dir: Path | None = None
        self.evidence: Evidence | None = None
        self.verdict: Verdict | None = None
        self._ledger_bytes = b""
        self._best: BestRecord | None = None
        self.started = time.time()
        self.stack: dict[str, str | None] = {}
        self.pregate: list[pregate.Finding] = []  # the static pre-gate's findings over the diff (flags only)
        self.live: LiveFile | None = None  # live.json for `dit-ar watch`

    # -- before the run -------------------------------------------------------------------
    def acquire(self) -> None:
        """One experiment per repo at a time: a second one is refused, never interleaved."""
        paths = StatePaths(load_config(self.config_path).root)
        paths.dir.mkdir(parents=True, exist_ok=True)
        self.lock = FileLock(str(paths.lock), timeout=0)
        try:
            self.lock.acquire()
        except Timeout:
            self.lock = None
            raise Refused(f"another experiment holds {paths.lock}: wait for it to finish "
                          "(one experiment per repository and GPU at a time)") from None

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
        record = session.require_current_layout()
        if session.paths.halt.exists():
            raise Refused(f"an earlier run changed what the harness relies on ({session.paths.halt}: "
                          f"{session.paths.halt.read_text().strip()[:300]}); inspect and repair that, then delete "
                          f"{session.paths.halt} to go on")
        if not record.device.same_device(session.target.identity):
            raise Refused(f"the session's baseline device is {record.device.name!r}, this run would use "
                          f"{session.target.identity.name!r}; start a new session")
        repo = self.repo = gitops.open_repo(session.root)
        gitops.require_branch(repo, record.tag)
        gitops.require_clean(repo)
        best = self._best = require_best(session.best(), session.lane_id)
        ref = gitops.read_ref(repo, gitops.best_ref(record.tag, session.lane_id))
        if ref and ref != best.commit:
            raise Refused(f"best.json names {best.commit[:10]} but the best ref names {ref[:10]}; run `dit-ar status`")
        shape = gitops.candidate_commit(repo, best.commit)
        self.commit, self.parent = shape.sha, shape.parent
        self.pregate = pregate.scan_commit(repo, shape.parent, shape.sha,
                                           tuple(p for p in shape.changed
                                                 if gitops.under(p, session.config.mutable_paths)))
        run_dir = session.paths.run(new_run_id(self.commit))
        evidence = Evidence(session, self.classification, run_dir, session.paths.best_worktree, prefetch_best=True,
                            candidate_root=session.paths.candidate_worktree if self.sandboxed else None,
                            sandboxed=self.sandboxed)
        self._check_stack(evidence.baseline().environment)  # read and verified once, before candidate code runs
        evidence.check_metrics_available()
        self.run_id, self.run_dir = run_dir.name, run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.live = LiveFile.start(session.paths.live, "experiment", run_dir.name, self.commit, self.description,
                                   session.lane_id, seconds=self.seconds)
        self._ledger_bytes = session.paths.ledger.read_bytes() if session.paths.ledger.exists() else b""
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
        paths = session.paths
        self._state_bytes = {p: p.read_bytes() for p in (paths.session, paths.best, paths.integrity) if p.exists()}
        self._fingerprint = tamper.fingerprint(repo, self._worktrees())
        self.evidence = evidence
        self.live.update(phase="quality", max_segments=session.lane.performance.max_segments)
        return None

    def _check_stack(self, recorded: dict) -> None:
        """Refuse when torch, diffusers, CUDA or the driver changed since the baseline (timings and outputs
        would compare two stacks, not two commits)."""
        self.stack = versions.stack(versions.collect())
        changed = versions.stack_differences(recorded, self.stack)
        if changed:
            raise Refused(f"the software stack changed since the baseline ({'; '.join(changed)}): a new baseline is "
                          "needed: `dit-ar init --tag NEW` at the lane's original baseline commit, then "
                          "`dit-ar baseline` (or restore the recorded versions)")

    def _worktrees(self) -> list[Path]:
        assert self.session is not None
        paths = self.session.paths
        return [paths.best_worktree] + ([paths.candidate_worktree] if self.sandboxed else [])

    def environment_changes(self) -> list[str]:
        """What a run changed that the harness relies on and cannot make read-only for itself."""
        assert self.repo is not None
        return tamper.changes(self._fingerprint, tamper.fingerprint(self.repo, self._worktrees()))

    # -- after the run --------------------------------------------------------------------
    def post_run_problems(self) -> RunDamage:
        """What the candidate may have changed while it ran: fixed files, baseline, ledger, state, git and the
        environment. A query: it writes nothing (`repair` puts back what can be put back)."""
        session, repo = self.session, self.repo
        assert session is not None and repo is not None and self.evidence is not None
        problems = verify_integrity(session)
        try:
            session.verified_baseline()
        except Refused as exc:
            problems.append(f"baseline: {exc}")
        restore: dict[Path, bytes] = {}
        ledger = session.paths.ledger
        current = ledger.read_bytes() if ledger.exists() else b""
        if current != self._ledger_bytes:
            problems.append("the ledger changed while the candidate ran (restored)")
            restore[ledger] = self._ledger_bytes
        for path, data in self._state_bytes.items():
            if not path.exists() or path.read_bytes() != data:
                problems.append(f"{path.name} changed while the candidate ran (restored)")
                restore[path] = data
        if gitops.head_sha(repo) != self.commit or \
                gitops.current_branch(repo) != gitops.branch_name(session.started.tag):
            problems.append("HEAD or the branch moved while the candidate ran")
        dirty = gitops.dirty_entries(repo)
        if dirty:
            problems.append(f"the candidate left changes in the tree: {dirty[:5]}")
        changed = tuple(self.environment_changes())
        if changed:
            problems.append(f"the run changed what the harness relies on: {list(changed[:5])}; experiments refuse "
                            f"until {session.paths.halt} is deleted")
        return RunDamage(tuple(problems), restore, changed)

    def repair(self, damage: RunDamage) -> None:
        """Put back the ledger and state files the run changed, and write HALT for environment changes (what the
        harness relies on and cannot restore itself)."""
        assert self.session is not None
        for path, data in damage.restore.items():
            write_bytes_atomic(path, data)
        if damage.environment:
            self.session.paths.halt.write_text("\n".join(damage.environment) + "\n")

    def guard_before_refusal(self) -> Verdict | None:
        """Run the post-run checks before the run ends in a refusal (a harness error, an interruption): what
        the candidate changed is judged and recorded (DISCARD-SCOPE, HALT) whatever else went wrong; None
        when it changed nothing (the refusal stands)."""
        if self.evidence is None or self.verdict is not None:
            return None
        damage = self.post_run_problems()
        if not damage.problems:
            return None
        self.repair(damage)
        return self.conclude(decide(damage.problems, None, None, None))

    def judge(self, outcomes: TestOutcomes) -> Verdict:
        """The verdict from the post-run guards, the evidence and the tests' outcomes."""
        evidence = self.evidence
        assert evidence is not None
        if self.live is not None:
            self.live.phase("judging")
        crash = evidence.crash
        damage = self.post_run_problems()
        self.repair(damage)
        return decide(damage.problems, str(crash) if crash else None,
                      self._quality_finding(outcomes), self._performance_finding(outcomes))

    def _quality_finding(self, outcomes: TestOutcomes) -> Finding | None:
        assessment = self.evidence.quality_result if self.evidence else None
        if not outcomes.quality or assessment is None:
            return None
        failed = outcomes.failed("quality")
        reasons = tuple(c.describe() for c in assessment.failures()[:8])
        if failed and not reasons:
            reasons = (f"quality tests failed: {failed[:5]}",)
        perf = self.evidence.performance_result if self.evidence else None
        unfaithful = tuple(perf.unfaithful[:5]) if perf else ()
        return Finding(not failed and assessment.passed and not unfaithful, reasons + unfaithful)

    def _performance_finding(self, outcomes: TestOutcomes) -> Finding | None:
        perf = self.evidence.performance_result if self.evidence else None
        if not outcomes.perf or perf is None:
            return None
        failed = outcomes.failed("perf")
        reasons = tuple(perf.reasons) or (f"performance tests did not pass: {failed[:5]}",)
        return Finding(not failed and perf.keep, reasons)

    def conclude(self, verdict: Verdict) -> Verdict:
        """Write the run record and the ledger row, then keep (move best) or reset to the explicit parent."""
        session, repo = self.session, self.repo
        assert session is not None and repo is not None and self.run_dir is not None
        self.verdict = verdict
        perf = self.evidence.performance_result if self.evidence else None
        measurements = Measurements(perf.median_ms("cand"), perf.p95_ms("cand")) if perf else None
        records.record_experiment(session, repo, self._row(verdict), self.run_dir, list(verdict.reasons),
                                  time.time() - self.started, measurements,
                                  {"seconds": self.seconds(), "software": self.stack,
                                   "startup": perf.startup() if perf else None,
                                   "pregate": pregate.as_records(self.pregate)})
        if verdict.status is not Status.KEEP:
            gitops.reset_to(repo, self.parent, session.config.mutable_paths)
            gitops.clean_untracked(repo, session.config.fixed_paths)
        if self.live is not None:
            self.live.finish(verdict.status.verdict_word)
        return verdict

    def seconds(self) -> dict[str, float]:
        """Where the experiment's wall time went: the evidence's phases, the rest, and the total."""
        phases = self.evidence.seconds if self.evidence else {}
        total = time.time() - self.started
        return {**phases, "harness_and_pytest": max(0.0, total - sum(phases.values())), "total": total}

    def _row(self, verdict: Verdict) -> LedgerRow:
        session = self.session
        assert session is not None and self.run_dir is not None
        evidence = self.evidence
        quality = evidence.quality_result if evidence else None
        perf = evidence.performance_result if evidence else None
        look = perf.look if perf else None
        best_ms = perf.median_ms("best") if perf else (self._best.measurements.median_ms if self._best else None)
        lane = session.lane
        return LedgerRow(
            timestamp=now(), run_id=self.run_id, lane=session.lane_id, commit=self.commit, parent=self.parent,
            status=verdict.status, declared_class=self.classification,
            effective_class=quality.effective_class if quality else "", metric=lane.primary_metric,
            best_before=lane.metric_value(best_ms),
            candidate=lane.metric_value(perf.median_ms("cand") if perf else None),
            improvement_pct=look.estimate_pct if look else None, p_value=perf.nominal_p if perf else None,
            peak_vram_mb=perf.peak_memory_mb("cand") if perf else None,
            quality_summary=quality.headline() if quality else "; ".join(verdict.reasons)[:300],
            description=self.description, run_dir=str(self.run_dir.relative_to(session.root)), reason=verdict.reason,
            flags="; ".join(f for f in ("" if self.sandboxed else "unsandboxed", pregate.flag(self.pregate)) if f))


def way_back(commit: str) -> str:
    """How to get a reset commit back: it stays in git's object store and the reflog."""
    sha = commit[:10]
    return (f"the reset commit {sha} is still in git (`git reflog`): `git cherry-pick -n {sha}` puts its changes "
            f"back in the working tree (keep the model_under_test/ part, commit again), `git show {sha}` shows it, "
            f"`git reset --hard {sha}` returns the branch to it as it was")
