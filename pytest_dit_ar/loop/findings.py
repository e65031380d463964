"""What `verdict.decide` is given about an experiment's tests, and the ledger row its verdict is recorded as.

`quality_finding` and `performance_finding` turn the evidence the harness measured and the suite tests'
outcomes into the verdict's `Finding`s (a gate whose tests did not run has no finding: the verdict discards);
`ledger_row` writes one experiment's row from its verdict and typed results.
"""

from __future__ import annotations

from dataclasses import dataclass

from dit_ar_contract.sides import Role
from quality_suite.assessment import QualityAssessment

from ..state.ledger import LedgerRow
from ..state.paths import now
from ..state.perf_record import PerfRecord
from ..state.session import Session
from .outcomes import TestOutcomes
from .verdict import Finding, Verdict


def quality_finding(outcomes: TestOutcomes, assessment: QualityAssessment | None,
                    perf: PerfRecord | None) -> Finding | None:
    """The quality gate: the assessment and the quality tests (and timed outputs that were not faithful)."""
    if not outcomes.quality or assessment is None:
        return None
    failed = outcomes.failed("quality")
    reasons = tuple(c.describe() for c in assessment.failures()[:8])
    if failed and not reasons:
        reasons = (f"quality tests failed: {failed[:5]}",)
    unfaithful = tuple(perf.unfaithful[:5]) if perf else ()
    return Finding(not failed and assessment.passed and not unfaithful, reasons + unfaithful)


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
