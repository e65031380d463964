"""The task-score gate of the approximate and quantization classes as one pure function, `judge_case_scores`: which
paired tests a class runs, with which margins and case-count conditions, their looks over growing case sets and the
stopping (quality_suite/noninferiority.py holds one look's statistics, quality_suite/case_rules.py the conditions).

* approximate  -- each per-case task metric against the original baseline, within `approximate.task_margin[name]`
                  (absolute for higher-is-better scores, a fraction of the baseline's corpus score for
                  lower-is-better ones), never tighter than the metric's resolution: the mean's bound within the
                  margin, no PASS before n_min cases, and the share of severe cases shown at most m / R;
* quantization -- a tolerance claim: each per-case task metric's mean within its *resolution*, no case beyond tau_q
                  and no PASS before n_pass cases, against the original baseline and, when the current best's
                  outputs are not the baseline's (a numerical, approximate or quantization keep), against the parent
                  too, so a quantization cannot spend headroom an earlier keep earned.

A test's condition follows where its margin comes from: a margin that is the resolution gets the tolerance claim,
an approximate margin the severe-case test. Set metrics (a Frechet distance) are reported, not gated: their figures
over the cases of the decision are shown beside the tests (`REPORTED_WHY`).

The resolution of a metric is what a change the harness knows to be harmless does to it: the largest degradation
estimate (the same statistic the test uses) of the baseline's benign reruns (split batches, reversed batches, one
thread or the math attention kernel) and of its images rounded to 8 bits, measured at baseline time, times the
exact gate's envelope multiple, never below the score's float resolution (`gates.resolution_floor`).

Undecided tests get more cases: the look sizes double from the corpus (40, 80, 160, ... on the embedded lane) up to
`case_budget_multiple` times the corpus. `run` asks a `CaseSupply` for them (the loop's: the holdout, then replicas
of the corpus cases under further keyed seeds, the baseline's scores stored at baseline time) and calls
`judge_case_scores` on every longer prefix of cases; a longer prefix replays the same earlier looks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from dit_ar_contract.classes import ChangeClass
from dit_ar_contract.config import QualityContract

from . import case_rules, task_metrics
from .case_scores import CaseScores
from .gates import resolution_floor, task_tolerances
from .noninferiority import (
    Decision,
    Design,
    Look,
    TestResult,
    TestSpec,
    decide,
    degradation,
    loss_look,
    seed_of,
    set_look,
)

BASELINE, PARENT = "baseline", "parent"
RESOLUTION = "resolution"  # the margin source of the tolerance claim
STOPPED = "undecided when the gate stopped"  # a test another's failure stopped before it decided
REPORTED_WHY = ("reported, not gated: over 40-200 cases a Frechet distance's small-sample bias exceeds the margin "
                "and its bootstrap misstates its spread (docs/design/quality-verdict.md)")


@dataclass(frozen=True)
class Block:
    """The cases one look adds: the candidate's per-case scores and each reference's (by reference name)."""

    cand: CaseScores
    refs: Mapping[str, CaseScores]


class CaseSupply(Protocol):
    """Where further cases come from (the loop generates the candidate's and the parent's outputs)."""

    def available(self) -> int:
        """How many more cases can be added."""
        ...

    def take(self, count: int, references: tuple[str, ...]) -> Block:
        """The next `count` cases, scored for the candidate and for each of `references`."""
        ...


@dataclass(frozen=True)
class Paired:
    """One metric's rows of one reference and of the candidate, the same cases in case order."""

    base: np.ndarray
    cand: np.ndarray


@dataclass(frozen=True)
class Figures:
    """What the baseline stored that the tests need: its corpus scores, each metric's resolution, the spread floors
    (margin source -> metric -> floor) and tau_q (metric -> the largest loss a quantization may leave a case)."""

    task_base: Mapping[str, float]
    resolutions: Mapping[str, float]
    spreads: Mapping[str, Mapping[str, float]] | None = None
    tolerances: Mapping[str, float] | None = None


@dataclass(frozen=True)
class Judgement:
    """The gate's decision over the cases so far: PASS, FAIL or MORE (then `needed` cases for the next look, for
    the tests against `waiting`), the cases its last look saw, every gated test and the reported set metrics."""

    decision: Decision
    cases: int
    needed: int
    tests: tuple[TestResult, ...]
    reported: tuple[TestResult, ...] = ()
    waiting: tuple[str, ...] = ()

    @property
    def results(self) -> tuple[TestResult, ...]:
        return self.tests + self.reported


class Shortfall(NamedTuple):
    """A metric whose class cannot pass on a lane: it needs more cases than the lane's budget."""

    metric: str
    cls: str
    needed: int  # n_min (approximate) or n_pass (quantization)
    budget: int


def design(quality: QualityContract, corpus_cases: int) -> Design:
    t = quality.noninferiority
    return Design(alpha=t.alpha_q, max_cases=max(corpus_cases, round(t.case_budget_multiple * corpus_cases)),
                  spending_gamma=t.spending_gamma, resamples=t.bootstrap_resamples, first_cases=corpus_cases,
                  tolerance_cases=t.tolerance_cases)


def statistic_degradation(name: str, base: np.ndarray, cand: np.ndarray) -> float:
    """The degradation estimate the test of metric `name` computes from paired rows (positive = worse)."""
    metric = task_metrics.metric(name)
    if metric.statistic is None:
        return float(degradation(base, cand, metric.lower_is_better).mean())
    return float(degradation(metric.statistic(base), metric.statistic(cand), metric.lower_is_better)[0])


def resolution(reference: CaseScores, harmless: Sequence[CaseScores], task_base: Mapping[str, float],
               multiple: float) -> dict[str, float]:
    """Per metric: the largest degradation a harmless change showed (times `multiple`), never below the floor."""
    out = {}
    for name, base_score in task_base.items():
        spread = 0.0
        for run in harmless:
            base, cand = reference.paired(run, name)
            if len(base):
                spread = max(spread, abs(statistic_degradation(name, base, cand)))
        out[name] = max(multiple * spread, resolution_floor(base_score))
    return out


def margins(cls: ChangeClass, quality: QualityContract, task_base: Mapping[str, float],
            resolutions: Mapping[str, float]) -> dict[str, tuple[float, str]]:
    """Per metric: the largest degradation the class allows, in the score's units, and where it comes from."""
    out = {}
    for name, base in task_base.items():
        res = resolutions.get(name, resolution_floor(base))
        if cls is ChangeClass.QUANTIZATION:
            out[name] = (res, "resolution")
            continue
        declared = quality.approximate.task_margin.get(name, 0.0)
        if name in task_metrics.lower_is_better():
            declared *= abs(base)
        out[name] = (declared, "approximate margin") if declared >= res else (res, "resolution")
    return out


def fallback_resolution(task_base: Mapping[str, float], task_envelope: Mapping[str, float] | None,
                        multiple: float) -> dict[str, float]:
    """For a baseline that recorded no resolution: the exact gate's task tolerance (its corpus-score spread)."""
    return task_tolerances(task_base, task_envelope, multiple)


def case_rule(name: str, margin: float, source: str, plan: Design, figures: Figures) -> case_rules.CaseRule:
    """The case-count condition of metric `name`'s test within `margin`: the tolerance claim when the margin is the
    resolution (tau_q as the baseline measured it; without one, the resolution floor), else the severe-case test."""
    metric = task_metrics.metric(name)
    base = figures.task_base.get(name)
    if source == RESOLUTION:
        tau_q = (figures.tolerances or {}).get(name)
        return case_rules.tolerance_rule(plan.alpha, tau_q if tau_q is not None else resolution_floor(base or 0.0),
                                         plan.tolerance_cases)
    bound = case_rules.loss_bound(metric.loss_bound, base)
    return case_rules.severe_rule(plan.alpha, margin, bound, metric.severe_fraction, metric.severe_at_flip,
                                  plan.schedule())


def specs(cls: ChangeClass | str, quality: QualityContract, figures: Figures, plan: Design, against_parent: bool,
          approximate_chain: bool = False) -> list[TestSpec]:
    """The tests of a class: each metric against the baseline (and the parent, for a quantization after a
    keep whose outputs are not the baseline's). A quantization is held to the resolution against its parent;
    against the original baseline too, unless the chain it builds on holds an approximate keep
    (`approximate_chain`): then the baseline test keeps the approximate margin, the budget of the whole chain.
    Each per-case test takes the spread floor and the case-count condition of where its margin comes from."""
    cls = ChangeClass.from_word(cls)
    if not cls.judged_on_the_task:
        return []
    own = margins(cls, quality, figures.task_base, figures.resolutions)
    if cls is not ChangeClass.QUANTIZATION or not against_parent:
        refs = {BASELINE: own}
    else:
        chain = margins(ChangeClass.APPROXIMATE, quality, figures.task_base, figures.resolutions) \
            if approximate_chain else own
        refs = {BASELINE: chain, PARENT: own}
    out = []
    for name in figures.task_base:
        metric = task_metrics.metric(name)
        for ref, m in refs.items():
            margin, source = m[name]
            spread = (figures.spreads or {}).get(source, {}).get(name, 0.0)
            rule = case_rule(name, margin, source, plan, figures) if metric.statistic is None else None
            out.append(TestSpec(name, ref, margin, source, metric.lower_is_better, metric.statistic, spread, rule))
    return out


# -- the decision --------------------------------------------------------------------------------------------------

@dataclass
class _Replay:
    """One gated test while its looks are replayed (private to `judge_case_scores`)."""

    spec: TestSpec
    loss: np.ndarray  # per-case degradation, positive = worse
    beyond: np.ndarray  # cumulative count of cases beyond the condition's threshold
    looks: list[Look]
    decision: Decision = Decision.MORE
    reason: str = ""

    @classmethod
    def of(cls, spec: TestSpec, pair: Paired | None) -> _Replay:
        if pair is None or not len(pair.base):
            return cls(spec, np.zeros(0), np.zeros(0, np.int64), [], Decision.FAIL,
                       f"no case scored on both sides (the {spec.reference}'s scores are missing)")
        base, cand = np.asarray(pair.base, np.float64), np.asarray(pair.cand, np.float64)
        loss = degradation(base, cand, spec.lower_is_better)
        flags = spec.rule.beyond(loss, base, cand) if spec.rule is not None else np.zeros(len(loss), bool)
        return cls(spec, loss, np.cumsum(flags), [])

    def look(self, n: int, before: int, last: bool, plan: Design) -> None:
        if len(self.loss) < n:
            self.decision, self.reason = Decision.FAIL, f"the {self.spec.reference}'s scores of cases past " \
                                                        f"{len(self.loss)} are missing"
            return
        rule = self.spec.rule
        min_cases = rule.min_cases if rule is not None else 0
        look = loss_look(self.loss[:n], plan.level(before, n, last), self.spec.spread, int(self.beyond[n - 1]),
                         n >= min_cases, self.spec.margin)
        self.looks.append(look)
        self.decision, self.reason = decide(look, self.spec.margin, last, rule, plan.max_cases)

    def result(self, stopped: bool) -> TestResult:
        decision, reason = self.decision, self.reason
        if decision is Decision.MORE and stopped:  # stopped before its last look (another test failed)
            decision, reason = Decision.FAIL, STOPPED
        s = self.spec
        return TestResult(s.metric, s.reference, s.margin, s.margin_source, tuple(self.looks), decision, reason,
                          s.rule)


def judge_case_scores(cls: ChangeClass | str, scores: Mapping[tuple[str, str], Paired], quality: QualityContract,
                      figures: Figures, first_cases: int, complete: bool = True, against_parent: bool = False,
                      approximate_chain: bool = False) -> Judgement:
    """The task-score decision of class `cls` over the cases so far (pure).

    `scores`: per (metric, reference) the two sides' rows in case order (`Paired`); `figures`: what the baseline
    stored; `first_cases`: the corpus size (the first look); `complete`: no further cases will come (the supply ran
    out), so the look at the last case is the last. Every gated test looks at the planned case counts the cases
    reach; the gate stops at the first FAIL, and a test that passed looks no more. Calling it on a longer prefix
    of the same cases replays the same earlier looks. MORE says how many cases the next look needs."""
    plan = design(quality, first_cases)
    tests = specs(cls, quality, figures, plan, against_parent, approximate_chain)
    replays = [_Replay.of(s, scores.get((s.metric, s.reference))) for s in tests if s.statistic is None]
    total = max((len(p.cand) for p in scores.values()), default=0)
    sizes = plan.sizes(total, complete)
    failed = any(r.decision is Decision.FAIL for r in replays)
    for k, n in enumerate(sizes):
        last = n >= plan.max_cases or (complete and n == total)
        for r in [r for r in replays if r.decision is Decision.MORE]:
            r.look(n, sizes[k - 1] if k else 0, last, plan)
        failed = failed or any(r.decision is Decision.FAIL for r in replays)
        if failed or all(r.decision is not Decision.MORE for r in replays):
            break
    undecided = [r for r in replays if r.decision is Decision.MORE]
    stopped = failed or (complete and bool(undecided))
    results = tuple(r.result(stopped) for r in replays)
    cases = max((r.looks[-1].n for r in replays if r.looks), default=0)
    if stopped or not replays:  # a test failed, or no per-case metric: nothing the gate can pass on
        decision = Decision.FAIL
    else:
        decision = Decision.MORE if undecided else Decision.PASS
    needed = next((n for n in plan.schedule() if n > (sizes[-1] if sizes else 0)), plan.max_cases)
    if decision is not Decision.MORE:
        needed = cases = cases or total
    reported = _reported(tests, scores, plan, cases) if decision is not Decision.MORE else ()
    waiting = tuple(dict.fromkeys(r.spec.reference for r in undecided)) if decision is Decision.MORE else ()
    return Judgement(decision, cases, needed, results, reported, waiting)


def _reported(tests: Sequence[TestSpec], scores: Mapping[tuple[str, str], Paired], plan: Design,
              cases: int) -> tuple[TestResult, ...]:
    """The set metrics' figures over the decision's cases: estimate and one-sided bound at alpha_q, not gated."""
    out = []
    for s in tests:
        if s.statistic is None:
            continue
        pair = scores.get((s.metric, s.reference))
        n = min(cases, len(pair.base)) if pair is not None else 0
        if n < 2:
            out.append(TestResult(s.metric, s.reference, s.margin, s.margin_source, (), Decision.REPORTED,
                                  f"not reported: the {s.reference}'s scores are missing", gated=False))
            continue
        look = set_look(pair.base[:n], pair.cand[:n], s.statistic, s.lower_is_better, plan.alpha, plan.resamples,
                        seed_of(s, n))
        out.append(TestResult(s.metric, s.reference, s.margin, s.margin_source, (look,), Decision.REPORTED,
                              REPORTED_WHY, gated=False))
    return tuple(out)


def paired_scores(cand: CaseScores, refs: Mapping[str, CaseScores]) -> dict[tuple[str, str], Paired]:
    """Per (metric, reference): the cases both sides scored, in the reference's order."""
    out = {}
    for ref, scores in refs.items():
        for metric in cand.rows:
            base, rows = scores.paired(cand, metric)
            if len(base):
                out[(metric, ref)] = Paired(base, rows)
    return out


def run(cls: ChangeClass | str, quality: QualityContract, figures: Figures, first: Block, first_cases: int,
        supply: CaseSupply | None = None, against_parent: bool = False,
        approximate_chain: bool = False) -> Judgement:
    """The harness's loop around `judge_case_scores`: the first block's cases, then further cases from `supply`
    (for the references of undecided tests only) while the decision is MORE, until the supply runs out."""
    cand, refs = first.cand, dict(first.refs)
    complete = supply is None
    while True:
        complete = complete or supply is None or supply.available() <= 0
        judgement = judge_case_scores(cls, paired_scores(cand, refs), quality, figures, first_cases, complete,
                                      against_parent, approximate_chain)
        have = len(cand.all_ids())
        if judgement.decision is not Decision.MORE or supply is None:
            return judgement
        block = supply.take(max(min(judgement.needed - have, supply.available()), 0), judgement.waiting)
        cand = cand.plus(block.cand)
        for name, scores in block.refs.items():
            refs[name] = refs.get(name, CaseScores()).plus(scores)
        complete = len(cand.all_ids()) == have  # a supply that gave nothing has run out


def cases_to_pass(cls: ChangeClass | str, quality: QualityContract, figures: Figures, first_cases: int,
                  approximate_chain: bool = False) -> int:
    """The fewest cases at which every gated test of `cls` against the baseline may pass: the first planned look at
    or beyond the largest n_min or n_pass of its tests, at most the case budget."""
    plan = design(quality, first_cases)
    tests = specs(cls, quality, figures, plan, False, approximate_chain)
    need = max((s.rule.min_cases for s in tests if s.rule is not None), default=first_cases)
    return next((n for n in plan.schedule() if n >= need), plan.max_cases)


def measured_failure(result: TestResult, plan: Design) -> str:
    """Why a FAIL was measured on the cases themselves: a regression (the lower bound beyond the margin), or the
    case-count condition broken by the cases seen (a severe share past its limit even at the budget, a case beyond
    tau_q); "" for a test that failed only because it was not shown (too few cases, the budget spent)."""
    if result.decision is not Decision.FAIL or not result.looks or not result.gated:
        return ""
    look = result.last
    if look.lower > result.margin:
        return "a regression measured (the lower bound exceeds the margin)"
    rule = result.rule
    if rule is None or look.beyond == 0 or plan.max_cases < rule.min_cases:
        return ""
    return rule.hopeless(look.beyond, plan.max_cases)


def cases_needed(quality: QualityContract, corpus_cases: int, task_metric_names: Sequence[str],
                 task_base: Mapping[str, float] | None = None) -> list[Shortfall]:
    """Every (metric, class) of a lane's per-case metrics with the cases its test needs before it may pass (n_min for
    an approximate change, n_pass for a quantization) and the lane's case budget. R of a CLIP score is the
    baseline's score when `task_base` gives it, else the score's range (a larger n_min: the check then errs
    towards reporting). Set metrics are not gated."""
    plan = design(quality, corpus_cases)
    out = []
    for name in task_metric_names:
        metric = task_metrics.metric(name)
        if metric.statistic is not None:
            continue
        base = (task_base or {}).get(name)
        declared = quality.approximate.task_margin.get(name, 0.0) * (abs(base or 0.0) if metric.lower_is_better
                                                                     else 1.0)
        bound = case_rules.loss_bound(metric.loss_bound, base)
        approximate = case_rules.n_min(plan.alpha, declared, bound) if declared > 0 else plan.tolerance_cases
        for cls, needed in ((ChangeClass.APPROXIMATE, approximate), (ChangeClass.QUANTIZATION, plan.tolerance_cases)):
            out.append(Shortfall(name, cls.word, needed, plan.max_cases))
    return out


def budget_shortfall(quality: QualityContract, corpus_cases: int, task_metric_names: Sequence[str],
                     task_base: Mapping[str, float] | None = None) -> list[Shortfall]:
    """The (metric, class) pairs a lane's case budget cannot pass (`cases_needed` beyond the budget)."""
    return [s for s in cases_needed(quality, corpus_cases, task_metric_names, task_base) if s.needed > s.budget]
