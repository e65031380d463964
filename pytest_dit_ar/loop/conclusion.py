"""What one judging concludes, and how the session's own process carries it out.

`quality_finding` and `performance_finding` turn the evidence the harness measured and the suite tests'
outcomes into what `verdict.decide` is given (a gate whose tests did not run has no finding: the verdict
discards); `ledger_row` writes one experiment's row from its verdict and typed results.

An experiment's verdict becomes an `ExperimentOutcome` (pure: the ledger row, the reasons, the measurements, the
run record's details and the spread to pool); `apply` writes it: the run record, the ledger row, the best or the
reset. A baseline's ends as a `BaselineOutcome` (its summary and row) that `records.record_baseline` writes.

In a local run the process that judged applies its outcome at once. In a fleet (fleet/) the judge runs in a
slot on some node and only writes its outcome into its run folder (`write`, `outcome.json`); the session's own
process reads it back (`read`) and applies it, so git, the ledger and the best have one writer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import git

from dit_ar_contract.sides import Role
from dit_ar_contract.status import Status
from perf_suite.sequential import PairSpread
from quality_suite.assessment import QualityAssessment

from ..state import gitops, records
from ..state.baseline import BaselineSummary
from ..state.best import Measurements
from ..state.files import load_record, write_record
from ..state.ledger import LedgerRow
from ..state.noise import record_spread
from ..state.paths import now
from ..state.perf_record import PerfRecord
from ..state.session import Session
from ..state.timed_quality import TimedQuality
from .guards.outcomes import TestOutcomes
from .verdict import Finding, Verdict

if TYPE_CHECKING:
    from .speed.measurement import PerfOutcome

OUTCOME = "outcome.json"  # an experiment judged elsewhere: what its session's process records
BASELINE_OUTCOME = "baseline-outcome.json"  # likewise for a baseline (the baseline folder comes with it)
ROW = "row.json"  # likewise for a re-validation: its ledger row


@dataclass(frozen=True)
class ExperimentOutcome:
    """One judged experiment, ready to record: nothing here has been written to the session yet."""

    row: LedgerRow
    reasons: tuple[str, ...]
    duration_s: float
    measurements: Measurements | None = None
    details: dict[str, Any] = field(default_factory=dict)  # the run record's extra keys (seconds, software, ...)
    spread: PairSpread | None = None  # a judge's pair spread against the best, pooled by the session's process

    @property
    def keep(self) -> bool:
        return self.row.status is Status.KEEP

    def with_provenance(self, flag: str, details: dict[str, Any]) -> ExperimentOutcome:
        """The same outcome with a flag added to its row (e.g. `attempt 2`) and more run-record details."""
        flags = "; ".join(f for f in (self.row.flags, flag) if f)
        return dataclasses.replace(self, row=dataclasses.replace(self.row, flags=flags),
                                   details={**self.details, **details})

    def as_dict(self) -> dict[str, Any]:
        m = self.measurements
        return {"row": self.row.as_dict(), "reasons": list(self.reasons), "duration_s": self.duration_s,
                "measurements": dataclasses.asdict(m) if m else None, "details": self.details,
                "spread": self.spread.as_dict() if self.spread else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExperimentOutcome:
        m, spread = data.get("measurements"), data.get("spread")
        return cls(LedgerRow.from_dict(data["row"]), tuple(data.get("reasons") or ()), float(data["duration_s"]),
                   Measurements(**m) if m else None, dict(data.get("details") or {}),
                   PairSpread(int(spread["pairs"]), float(spread["spread_var"]), float(spread["within_var"]))
                   if spread else None)


def spread_to_pool(perf: PerfOutcome | None) -> PairSpread | None:
    """The spread an experiment adds to the session's pool: a faithful timing's only (as `timing.learn_noise`)."""
    return perf.spread if perf is not None and perf.spread is not None and not perf.unfaithful else None


def write(outcome: ExperimentOutcome, run_dir: Path) -> None:
    write_record(run_dir / OUTCOME, outcome.as_dict())


def read(run_dir: Path) -> ExperimentOutcome | None:
    data = load_record(run_dir / OUTCOME)
    return ExperimentOutcome.from_dict(data) if data else None


def apply(session: Session, repo: git.Repo, outcome: ExperimentOutcome, run_dir: Path) -> None:
    """Record the outcome (the session's own process only): the pooled spread, the run record, the ledger row and a
    keep's new best; anything else resets the branch to the row's parent."""
    row = outcome.row
    if outcome.spread is not None:
        record_spread(session.paths, session.lane_id, row.parent, row.run_id, outcome.spread)
    records.record_experiment(session, repo, row, run_dir, list(outcome.reasons), outcome.duration_s,
                              outcome.measurements, outcome.details)
    if not outcome.keep:
        reset(session, repo, row.parent)


def settle(session: Session, repo: git.Repo, outcome: ExperimentOutcome, run_dir: Path, judge_only: bool) -> None:
    """A judge (`judge_only`) writes the outcome for its session's process; the session's own process applies it."""
    if judge_only:
        write(outcome, run_dir)
    else:
        apply(session, repo, outcome, run_dir)


def reset(session: Session, repo: git.Repo, parent: str) -> None:
    """A discarded candidate's branch back to its parent, and whatever it left in the fixed paths removed."""
    gitops.reset_to(repo, parent, session.config.mutable_paths)
    gitops.clean_untracked(repo, session.config.fixed_paths)


@dataclass(frozen=True)
class BaselineOutcome:
    """A baseline taken elsewhere (a fleet's slot): its summary and ledger row; its folder's files beside it."""

    summary: BaselineSummary
    row: LedgerRow

    def as_dict(self) -> dict[str, Any]:
        return {"summary": self.summary.as_dict(), "row": self.row.as_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BaselineOutcome:
        return cls(BaselineSummary.from_dict(data["summary"]), LedgerRow.from_dict(data["row"]))


def write_baseline(outcome: BaselineOutcome, run_dir: Path) -> None:
    write_record(run_dir / BASELINE_OUTCOME, outcome.as_dict())


def read_baseline(run_dir: Path) -> BaselineOutcome | None:
    data = load_record(run_dir / BASELINE_OUTCOME)
    return BaselineOutcome.from_dict(data) if data else None


# -- what the verdict is given, and the row it is recorded as -----------------------------------------------


def quality_finding(outcomes: TestOutcomes, assessment: QualityAssessment | None,
                    perf: PerfRecord | None, timed: TimedQuality | None = None) -> Finding | None:
    """The quality gate: the assessment and the quality tests, the timed outputs that were not faithful, and the
    timed outputs judged on the task (`timed`: a FAIL measured on the timed cases fails the gate; undecided is
    reported, not failed). A failed task-score test's reason is its refusal (what would decide it)."""
    if not outcomes.quality or assessment is None:
        return None
    failed = outcomes.failed("quality")
    reasons = tuple(assessment.reasons()[:8])
    if failed and not reasons:
        reasons = (f"quality tests failed: {failed[:5]}",)
    on_task = tuple(timed.reasons[:3]) if timed is not None and timed.failed else ()
    unfaithful = tuple(perf.unfaithful[:5]) if perf else ()
    return Finding(not failed and assessment.passed and not unfaithful and not on_task,
                   reasons + on_task + unfaithful)


def performance_finding(outcomes: TestOutcomes, perf: PerfRecord | None) -> Finding | None:
    """The performance gate: the sequential test's outcome and the perf tests."""
    if not outcomes.perf or perf is None:
        return None
    failed = outcomes.failed("perf")
    reasons = tuple(perf.reasons) or (f"performance tests did not pass: {failed[:5]}",)
    return Finding(not failed and perf.keep, reasons)


@dataclass(frozen=True)
class Candidate:
    """Which experiment a row is about: its run, commit and what the agent declared."""

    run_id: str
    commit: str
    parent: str
    declared_class: str
    description: str
    run_dir: str  # relative to the project root
    flags: str = ""


def ledger_row(session: Session, who: Candidate, verdict: Verdict, quality: QualityAssessment | None,
               perf: PerfRecord | None, best_before_ms: float | None) -> LedgerRow:
    """The experiment's ledger row (the best's median from this run's timing when it has one)."""
    look = perf.look if perf else None
    best_ms = perf.median_ms(Role.BEST) if perf else best_before_ms
    lane = session.lane
    return LedgerRow(
        timestamp=now(), run_id=who.run_id, lane=session.lane_id, commit=who.commit, parent=who.parent,
        status=verdict.status, declared_class=who.declared_class,
        effective_class=quality.effective_class if quality else "", metric=lane.primary_metric,
        best_before=lane.metric_value(best_ms),
        candidate=lane.metric_value(perf.median_ms(Role.CANDIDATE) if perf else None),
        improvement_pct=look.estimate_pct if look else None, p_value=perf.nominal_p if perf else None,
        peak_vram_mb=perf.peak_memory_mb(Role.CANDIDATE) if perf else None,
        quality_summary=quality.headline() if quality else "; ".join(verdict.reasons)[:300],
        description=who.description, run_dir=who.run_dir, reason=verdict.reason, flags=who.flags)
