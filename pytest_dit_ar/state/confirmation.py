"""`.autoresearch/confirmation/<lane>.json`: the session's best re-tested against the original baseline on fresh
seeds (loop/quality/confirmation.py runs it; `dit-ar summary`, `dit-ar report` and `dit-ar revalidate` show it).

A best whose class against the original baseline is approximate or quantization was kept on tests that every
candidate of the session ran on the same session-keyed cases, each at its own false-pass rate alpha_q; a session
that judged many candidates on those cases has more than alpha_q of a chance to have kept one by luck. The
confirmation re-tests the best once more on cases no candidate saw, at alpha_q, and records here: the best, the
class it was judged at, the decision, the cases and every test with its looks (estimate, bounds, margin). A
re-validation's run folder holds a copy (`confirmation.json`), which is what a fleet's slot writes.

A confirmation that fails is information: it changes nothing in git, the ledger or the best.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dit_ar_contract.classes import ChangeClass
from quality_suite.noninferiority import TestResult

from .best import BestRecord
from .files import load_record, write_record
from .paths import StatePaths

RUN_RECORD = "confirmation.json"  # the copy in a re-validation's run folder
CONFIRMED, NOT_CONFIRMED = "confirmed", "not confirmed"
NOTHING = "nothing to confirm"


@dataclass(frozen=True)
class ConfirmationRecord:
    """One confirmation of a lane's best against the original baseline on fresh seeds."""

    lane_id: str
    best_commit: str
    baseline_commit: str
    best_class: str  # the best's effective class against the original baseline
    judged_as: str  # the class whose tests ran (approximate when a quantization's chain holds an approximate keep)
    confirmed: bool
    cases: int  # the fresh cases the decision saw
    tests: tuple[TestResult, ...]
    created: str
    reason: str = ""  # why it is not confirmed, in words
    run_id: str = ""  # the run folder of its workers' logs
    seconds: float = 0.0
    revert: str = ""  # what to do when it is not confirmed (the command)
    reported: tuple[TestResult, ...] = field(default_factory=tuple)  # set metrics, reported only

    @property
    def decision(self) -> str:
        return CONFIRMED if self.confirmed else NOT_CONFIRMED

    def test_lines(self) -> list[str]:
        """Each test: estimate, its one-sided bound and lower bound, the margin, the cases and the condition."""
        lines = []
        for r in self.tests + self.reported:
            if not r.looks:
                lines.append(f"{r.metric} vs the original baseline: {r.reason}")
                continue
            look = r.last
            level = 100 * (1 - r.alpha_spent())
            condition = f"; {r.condition_text()}" if r.rule is not None else ""
            verdict = r.decision.value.upper() if r.gated else "reported, not gated"
            lines.append(f"{r.metric} vs the original baseline: degradation {look.estimate:+.3g}, one-sided "
                         f"{level:.3g}% bound {look.upper:+.3g} (lower {look.lower:+.3g}) vs {r.margin_source} "
                         f"{r.margin:.3g} over {look.n} fresh cases{condition}: {verdict}"
                         + (f" ({r.reason})" if r.reason and r.gated and not r.passed else ""))
        return lines

    def headline(self) -> str:
        judged = self.best_class if self.judged_as == self.best_class else \
            f"{self.best_class}, judged at the {self.judged_as} claim"
        why = f": {self.reason}" if self.reason and not self.confirmed else ""
        return (f"{self.decision.upper()}: best {self.best_commit[:10]} ({judged}) against the original baseline "
                f"{self.baseline_commit[:10]} on {self.cases} fresh cases{why} ({self.created})")

    def as_dict(self) -> dict[str, Any]:
        return {"lane_id": self.lane_id, "best_commit": self.best_commit, "baseline_commit": self.baseline_commit,
                "best_class": self.best_class, "judged_as": self.judged_as, "confirmed": self.confirmed,
                "decision": self.decision, "cases": self.cases, "tests": [t.as_dict() for t in self.tests],
                "reported": [t.as_dict() for t in self.reported], "created": self.created, "reason": self.reason,
                "run_id": self.run_id, "seconds": self.seconds, "revert": self.revert, "headline": self.headline()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConfirmationRecord:
        def tests(key: str) -> tuple[TestResult, ...]:
            return tuple(TestResult.from_dict(t) for t in data.get(key) or () if isinstance(t, Mapping))

        return cls(str(data.get("lane_id", "")), str(data.get("best_commit", "")),
                   str(data.get("baseline_commit", "")), str(data.get("best_class", "")),
                   str(data.get("judged_as", "")), bool(data.get("confirmed", False)), int(data.get("cases", 0)),
                   tests("tests"), str(data.get("created", "")), str(data.get("reason", "")),
                   str(data.get("run_id", "")), float(data.get("seconds", 0.0)), str(data.get("revert", "")),
                   tests("reported"))


def needs_confirmation(best: BestRecord | None, baseline_commit: str | None) -> bool:
    """Whether the best is one a confirmation re-tests: kept, and approximate or quantization against the original
    baseline."""
    if best is None or not best.commit or best.commit == baseline_commit:
        return False
    try:
        return ChangeClass.from_word(best.effective_class).judged_on_the_task
    except ValueError:
        return False


def write(paths: StatePaths, record: ConfirmationRecord, run_dir: Path | None = None) -> None:
    """The lane's record (the session's own process) and, with `run_dir`, the run folder's copy."""
    if run_dir is not None:
        write_record(run_dir / RUN_RECORD, record.as_dict())
    write_record(paths.confirmation(record.lane_id), record.as_dict())


def write_run_copy(run_dir: Path, record: ConfirmationRecord) -> None:
    """The run folder's copy alone (a fleet's judge: the session's process reads it from there)."""
    write_record(run_dir / RUN_RECORD, record.as_dict())


def read_file(path: Path) -> ConfirmationRecord | None:
    data = load_record(path)
    try:
        return ConfirmationRecord.from_dict(data) if data else None
    except (TypeError, ValueError):
        return None


def read(paths: StatePaths, lane_id: str) -> ConfirmationRecord | None:
    """The lane's last confirmation, None when there is none."""
    return read_file(paths.confirmation(lane_id))


def of_best(paths: StatePaths, lane_id: str, best_commit: str,
            run_dirs: tuple[Path, ...] = ()) -> ConfirmationRecord | None:
    """The newest confirmation of this best: the lane's record, else a run folder's copy (newest first)."""
    found = [r for r in [read(paths, lane_id), *(read_file(d / RUN_RECORD) for d in run_dirs)]
             if r is not None and r.best_commit == best_commit and r.lane_id == lane_id]
    return max(found, key=lambda r: r.created) if found else None


@dataclass(frozen=True)
class ConfirmationView:
    """What the summary and the report say of the confirmation: one headline and the lines under it."""

    headline: str
    lines: tuple[str, ...] = ()


def view(best: BestRecord | None, baseline_commit: str | None, record: ConfirmationRecord | None,
         skipped: bool = False, why_not: str = "") -> ConfirmationView:
    """confirmed / not confirmed with the tests' figures, or why it was not run: nothing to confirm, skipped
    (`--no-confirm`), or not confirmed yet (`why_not` says why, e.g. a refusal)."""
    if not needs_confirmation(best, baseline_commit):
        cls = best.effective_class if best else "-"
        return ConfirmationView(f"{NOTHING}: the best's class against the original baseline is {cls} (no "
                                "approximate or quantization keep)")
    if record is not None:
        extra = () if record.confirmed or not record.revert else (record.revert,)
        return ConfirmationView(record.headline(), tuple(record.test_lines()) + extra)
    if skipped:
        return ConfirmationView(f"{NOT_CONFIRMED} (skipped): `--no-confirm`; `dit-ar summary` or `dit-ar revalidate` "
                                "confirms the best on fresh seeds")
    return ConfirmationView(f"{NOT_CONFIRMED} yet: the best has not been confirmed on fresh seeds"
                            + (f" ({why_not})" if why_not else "") + "; `dit-ar summary` or `dit-ar revalidate` "
                            "runs the confirmation")
