"""The timed rounds judged on the task (loop/quality/timed.py), as experiment.json records them (`timed_quality`).

Both sides' outputs of the timed rounds (fresh seeds, the same requests on both sides) are scored by the lane's
task metrics and the candidate's class's paired tests run on them against the best. `fail` (a regression or a
broken case-count condition measured on the timed cases) fails the quality verdict; `undecided` (too few timed
cases for n_min or n_pass) and `pass` are reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from quality_suite.noninferiority import TestResult

FAIL, PASS, UNDECIDED = "fail", "pass", "undecided"


@dataclass(frozen=True)
class TimedQuality:
    """The task-score tests of the timed rounds' outputs, candidate against the best."""

    effective_class: str
    cases: int  # timed cases scored on both sides
    decision: str  # FAIL, PASS or UNDECIDED
    tests: tuple[TestResult, ...] = ()
    reasons: tuple[str, ...] = ()  # a FAIL's reasons, each naming the timed cases

    @property
    def failed(self) -> bool:
        return self.decision == FAIL

    def lines(self) -> list[str]:
        """One line per test, then the decision: what the summary prints under `timed quality:`."""
        out = []
        for r in self.tests:
            if not r.looks:
                out.append(f"{r.metric} vs {r.reference}: {r.reason}")
                continue
            look = r.last
            condition = f"; {r.condition_text()}" if r.rule is not None else ""
            out.append(f"{r.metric} vs {r.reference}: degradation {look.estimate:+.3g} [upper bound "
                       f"{look.upper:+.3g}, lower {look.lower:+.3g}] vs {r.margin_source} {r.margin:.3g} over "
                       f"{look.n} timed cases{condition}: {r.decision.value.upper()}")
        word = {FAIL: "FAIL: the candidate does something different when timed", PASS: "pass",
                UNDECIDED: "undecided on the timed cases (reported; the corpus tests decided)"}
        return out + [f"{self.cases} timed cases, both sides scored: {word.get(self.decision, self.decision)}"]

    def as_dict(self) -> dict[str, Any]:
        return {"effective_class": self.effective_class, "cases": self.cases, "decision": self.decision,
                "tests": [t.as_dict() for t in self.tests], "reasons": list(self.reasons)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> TimedQuality | None:
        if not isinstance(data, Mapping) or not data:
            return None
        return cls(str(data.get("effective_class", "")), int(data.get("cases", 0)),
                   str(data.get("decision", UNDECIDED)),
                   tuple(TestResult.from_dict(t) for t in data.get("tests") or () if isinstance(t, Mapping)),
                   tuple(str(r) for r in data.get("reasons") or ()))
