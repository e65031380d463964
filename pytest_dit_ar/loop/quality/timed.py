"""What is timed is what is judged: the timed rounds' outputs scored on the lane's task metrics.

Every timed round runs the candidate and the best on the same fresh requests (loop/speed/segment.py), and the
speed room hands each round's requests and both sides' outputs to the plan's collector: a `TimedCases` here, which
the loop's top puts in the plan (loop/evidence.py). After timing, for a candidate whose effective class is
approximate or quantization on a lane with a per-case task metric, `judge` scores both sides by the lane's task
metrics (each request's label: the corpus label of its prompt) and runs the class's paired tests on them with the
best as the reference, at the class's margin (`judge_case_scores`, as for the corpus). A FAIL measured on the timed
cases (a regression beyond the margin, a severe share or a case beyond tau_q that breaks the claim) fails the
quality verdict, with a reason naming the timed cases: a candidate that does anything different when timed fails
the quality verdict, not only a floor. A test the timed cases cannot decide (fewer than n_min or n_pass) is
reported; the corpus tests decided. Exact and numerical candidates keep the per-round pixel floors alone
(loop/speed/timing.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from dit_ar_contract.classes import ChangeClass
from quality_suite import task_metrics, task_tests
from quality_suite.corpora import Case
from quality_suite.noninferiority import Decision, TestResult

from ...state.baseline import BaselineSummary
from ...state.session import Session
from ...state.timed_quality import FAIL, PASS, UNDECIDED, TimedQuality
from .assess import figures
from .cases import budget, scores_of

REFERENCE = "best (timed rounds)"


@dataclass
class TimedCases:
    """The timed rounds' outputs as cases, both sides (up to `limit` cases: the lane's case budget)."""

    labels: dict[str, int | None]  # the corpus label of each prompt
    limit: int
    cases: list[Case] = field(default_factory=list)
    cand: dict[str, torch.Tensor] = field(default_factory=dict)
    best: dict[str, torch.Tensor] = field(default_factory=dict)

    def __call__(self, requests: list[list[Any]], cand: Any, best: Any) -> None:
        """One round: its requests ([prompt, seed] each) and the candidate's and the best's outputs of them."""
        for i, (prompt, seed) in enumerate(requests):
            if len(self.cases) >= self.limit:
                return
            cid = f"timed-{len(self.cases) + 1}"
            self.cases.append(Case(cid, str(prompt), int(seed), self.labels.get(str(prompt))))
            self.cand[cid] = cand.images[i].detach().clone()
            self.best[cid] = best.images[i].detach().clone()


def collector(session: Session, effective_class: str, corpus: list[Case]) -> TimedCases | None:
    """A collector of the timed outputs when the class's claim is about the task and the lane has a per-case task
    metric (None otherwise: the per-round pixel floors judge the timed outputs alone)."""
    if not ChangeClass.from_word(effective_class).judged_on_the_task:
        return None
    if not any(task_metrics.metric(n).statistic is None for n in session.lane.task_metrics):
        return None
    labels: dict[str, int | None] = {}
    for case in corpus:
        labels.setdefault(case.prompt, case.label)
    return TimedCases(labels, budget(session, corpus))


def _reason(r: TestResult, why: str) -> str:
    look = r.last
    condition = f"; {r.condition_text()}" if r.rule is not None else ""
    return (f"timed rounds: {r.metric} of the candidate against the best's outputs of the same {look.n} timed cases "
            f"(fresh seeds, both sides scored by the lane's task metrics): {why}; degradation {look.estimate:+.3g} "
            f"[lower bound {look.lower:+.3g}, upper {look.upper:+.3g}] vs the {r.margin_source} {r.margin:.3g}"
            f"{condition}: the candidate does something different when timed")


def judge(session: Session, timed: TimedCases, effective_class: str, base: BaselineSummary,
          corpus_cases: int) -> TimedQuality:
    """Score both sides' timed outputs and run the class's tests against the best (the parent)."""
    quality = session.lane.quality
    cls = ChangeClass.from_word(effective_class)
    cand, best = scores_of(session, timed.cand, timed.cases), scores_of(session, timed.best, timed.cases)
    judgement = task_tests.judge_case_scores(cls, task_tests.paired_scores(cand, {task_tests.BASELINE: best}),
                                             quality, figures(base, quality), corpus_cases, complete=True)
    tests = tuple(dataclasses.replace(r, reference=REFERENCE) for r in judgement.results)
    plan = task_tests.design(quality, corpus_cases)
    failures = [(r, why) for r in tests if (why := task_tests.measured_failure(r, plan))]
    decision = FAIL if failures else PASS if judgement.decision is Decision.PASS else UNDECIDED
    return TimedQuality(cls.word, len(timed.cases), decision, tests, tuple(_reason(r, why) for r, why in failures))
