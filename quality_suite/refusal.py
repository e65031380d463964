"""What would decide a refused task-score test (pure): for each FAIL of the approximate or quantization gate, the
figures that refused it, whether more cases could pass it at all, the case budget and the key that raises it, and
the class's claim in one sentence. `docs/guide/reading-a-verdict.md` glosses the terms.

Whether more cases could pass a test comes from its bound's trend. The bound is the estimate plus a half-width
that shrinks as 1/sqrt(n) (the standard error is a spread over sqrt(n), the spread floor's too), so each doubling
of the cases takes about (1 - 1/sqrt 2), 29 %, off it:

* an estimate above the margin cannot pass at any number of cases (the bound falls towards the estimate, never
  below it);
* a case beyond tau_q breaks the quantization claim for good (it needs zero such cases);
* otherwise the half-width h must fall to the room left, margin - estimate: about n (h / room)^2 cases, never
  fewer than n_min or n_pass; a severe share below its limit needs the cases at which its Clopper-Pearson bound,
  at the same share, falls within the limit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from dit_ar_contract.config import QualityContract

from .case_rules import TOLERANCE, CaseRule, cp_upper
from .noninferiority import Decision, Design, TestResult
from .task_tests import STOPPED, budget_shortfall, design

GUIDE = "docs/guide/reading-a-verdict.md"
BUDGET_KEY = "quality.noninferiority.case_budget_multiple"  # under lanes.<lane>. for one lane
SHRINK_PER_DOUBLING = 1 - 1 / math.sqrt(2)
MOST_CASES = 10 ** 7  # beyond this, no count of cases is worth naming


@dataclass(frozen=True)
class Refusal:
    """One refused test: its figures, the case budget, what more cases could do, and the claim it did not show."""

    metric: str
    reference: str
    estimate: float
    upper: float
    lower: float
    margin: float
    margin_source: str
    cases: int
    budget: int
    corpus: int
    multiple: float
    key: str  # the setting that raises the budget
    outlook: str  # whether more cases could pass it, in words
    cases_needed: int | None  # about how many cases would (None: none can)
    claim: str
    why: str  # the test's own reason

    @property
    def check_name(self) -> str:
        """The name of the gate's check of this test (quality_suite/gates.py `test_check`)."""
        return self.metric if self.reference == "baseline" else f"{self.metric} vs {self.reference}"

    def raise_to(self) -> float | None:
        """The budget multiple that would hold `cases_needed` (None when no count would do)."""
        if self.cases_needed is None or self.cases_needed <= self.budget or self.corpus <= 0:
            return None
        return float(math.ceil(self.cases_needed / self.corpus))

    def budget_text(self) -> str:
        target = self.raise_to()
        more = f"; raise it to {target:g} for {self.cases_needed} cases" if target is not None else ""
        return (f"the case budget is {self.budget} cases ({self.multiple:g} x the {self.corpus}-case corpus, "
                f"`{self.key}`{more})")

    def line(self) -> str:
        """The verdict's line: what failed and by how much, the budget, the outlook, the claim, the glossary."""
        return (f"{self.metric} vs {self.reference}: {self.why}: degradation {self.estimate:+.3g} vs the "
                f"{self.margin_source} {self.margin:.3g}, one-sided bound {self.upper:+.3g} (lower {self.lower:+.3g}) "
                f"over {self.cases} cases; {self.outlook}; {self.budget_text()}; {self.claim} (terms: {GUIDE})")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "line": self.line()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Refusal:
        needed = data.get("cases_needed")
        return cls(str(data.get("metric", "")), str(data.get("reference", "")), float(data.get("estimate", 0.0)),
                   float(data.get("upper", 0.0)), float(data.get("lower", 0.0)), float(data.get("margin", 0.0)),
                   str(data.get("margin_source", "")), int(data.get("cases", 0)), int(data.get("budget", 0)),
                   int(data.get("corpus", 0)), float(data.get("multiple", 0.0)), str(data.get("key", "")),
                   str(data.get("outlook", "")), int(needed) if needed is not None else None,
                   str(data.get("claim", "")), str(data.get("why", "")))


def claim(result: TestResult, alpha: float) -> str:
    """The claim the test's class makes, in one sentence (by its case-count condition: the severe-case test is the
    approximate claim's, the tolerance the quantization claim's)."""
    rule = result.rule
    against = "the original baseline" if result.reference == "baseline" else f"the {result.reference}"
    if rule is not None and rule.kind == TOLERANCE:
        return (f"the quantization claim: the mean {result.metric} within the resolution {result.margin:.3g} of "
                f"{against}, and at most p0 = {100 * rule.limit:.3g}% of the cases moved by more than tau_q "
                f"{rule.threshold:.3g}, each shown at a false-pass rate alpha_q = {alpha:g}")
    ruined = f", and at most m/R = {100 * rule.limit:.3g}% of cases ruined" if rule is not None else ""
    return (f"the approximate claim: no worse at the task ({result.metric}) than {against} by more than the margin "
            f"{result.margin:.3g}{ruined}, shown at a false-pass rate alpha_q = {alpha:g}")


def _severe_cases(rule: CaseRule, count: int, n: int) -> int | None:
    """The cases at which the severe share's bound, at the share seen, falls within the limit (None: never)."""
    share = count / n
    if share >= rule.limit:
        return None
    m = n
    while m < MOST_CASES:
        m *= 2
        if cp_upper(math.ceil(share * m), m, rule.level) <= rule.limit:
            return m
    return None


def outlook(result: TestResult, budget: int) -> tuple[str, int | None]:
    """Whether more cases could pass the test, in words, and about how many would (None: none)."""
    look, rule = result.last, result.rule
    if rule is not None and rule.kind == TOLERANCE and look.beyond > 0:
        return f"{look.beyond} case(s) beyond tau_q already break the claim: more cases cannot pass it", None
    if look.estimate > result.margin:
        return "the estimate itself is above the margin: more cases cannot pass it", None
    need = rule.min_cases if rule is not None else 0
    if rule is not None and look.beyond > 0:
        severe = _severe_cases(rule, look.beyond, look.n)
        if severe is None:
            return "the severe share seen is at its limit: more cases cannot pass it", None
        need = max(need, severe)
    half, room = look.upper - look.estimate, result.margin - look.estimate
    if look.upper > result.margin and room > 0 and math.isfinite(half):
        need = max(need, math.ceil(look.n * (half / room) ** 2))
    if need >= MOST_CASES:
        return "more cases could pass it only in the millions", None
    falls = f"the bound falls about {SHRINK_PER_DOUBLING * half:.2g} per doubling of the cases: " \
        if math.isfinite(half) and look.upper > result.margin else ""
    return f"{falls}about {max(need, look.n)} cases would be needed, the budget is {budget}", max(need, look.n)


def explain(result: TestResult, plan: Design, corpus: int, multiple: float, key: str) -> Refusal | None:
    """The refusal of one gated test that failed on its own (None for a pass, a report, a test stopped undecided
    by another's failure, or one with no look)."""
    if result.decision is not Decision.FAIL or not result.gated or not result.looks:
        return None
    if result.reason == STOPPED:
        return None
    look = result.last
    text, needed = outlook(result, plan.max_cases)
    return Refusal(result.metric, result.reference, look.estimate, look.upper, look.lower, result.margin,
                   result.margin_source, look.n, plan.max_cases, corpus, multiple, key, text, needed,
                   claim(result, plan.alpha), result.reason or "not shown")


def shortfall_line(lane: str, metric: str, cls: str, needed: int, budget: int, corpus: int, multiple: float) -> str:
    """A lane whose case budget cannot pass a class of change of a metric, the budget it needs and the key that
    raises it (quality_suite/task_tests.py `budget_shortfall`)."""
    name = "n_pass" if cls == "quantization" else "n_min"
    article = "an" if cls[:1] in ("a", "e", "i", "o", "u") else "a"
    return (f"lane {lane} cannot pass {article} {cls} change of {metric}: its test needs {name} = {needed} cases, "
            f"the case budget is {budget} ({multiple:g} x the {corpus}-case corpus); set lanes.{lane}.{BUDGET_KEY} "
            f"to at least {math.ceil(needed / max(corpus, 1))}")


def shortfall_lines(lane: str, quality: QualityContract, corpus: int, metric_names: Sequence[str],
                    task_base: Mapping[str, float] | None = None, classes: Sequence[str] | None = None) -> list[str]:
    """Every (metric, class) a lane's case budget cannot pass, as `shortfall_line`s (only `classes` when given)."""
    budget = design(quality, corpus).max_cases
    return [shortfall_line(lane, s.metric, s.cls, s.needed, budget, corpus, quality.noninferiority.case_budget_multiple)
            for s in budget_shortfall(quality, corpus, metric_names, task_base)
            if classes is None or s.cls in classes]
