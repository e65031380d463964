"""The task-score gate of the approximate and quantization classes: which paired non-inferiority tests run, with
which margins, and their looks over growing case sets (quality_suite/noninferiority.py holds the statistics).

* approximate  -- each task metric against the original baseline, within `approximate.task_margin[name]`
                  (absolute for higher-is-better scores, a fraction of the baseline's corpus score for
                  lower-is-better ones), never tighter than the metric's resolution;
* quantization -- zero regression: each task metric within its *resolution* against the original baseline and,
                  when the current best's outputs are not the baseline's (a numerical, approximate or
                  quantization keep), against the parent too, so a quantization cannot spend headroom an
                  earlier keep earned.

The resolution of a metric is what a change the harness knows to be harmless does to it: the largest degradation
estimate (the same statistic the test uses) of the baseline's benign reruns (split batches, reversed batches, one
thread or the math attention kernel) and of its images rounded to 8 bits, measured at baseline time, times the
exact gate's envelope multiple, never below the score's float resolution (`gates.resolution_floor`). "Zero
regression" therefore means: not worse than an exact change can make the score, shown at the false-pass rate
`noninferiority.alpha_q`.

Undecided tests get more cases: the look sizes double from the corpus (40, 80, 160, ... on the embedded lane) up to
`case_budget_multiple` times the corpus; the cases come from a `CaseSupply` (the loop's: the holdout, then replicas
of the corpus cases under further keyed seeds, the baseline's scores stored at baseline time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from dit_ar_contract.classes import ChangeClass
from dit_ar_contract.config import QualityContract

from . import task_metrics
from .case_scores import CaseScores
from .gates import resolution_floor, task_tolerances
from .noninferiority import Decision, Design, SequentialTest, TestResult, TestSpec, degradation

BASELINE, PARENT = "baseline", "parent"


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


def design(quality: QualityContract, corpus_cases: int) -> Design:
    t = quality.noninferiority
    return Design(alpha=t.alpha_q, max_cases=max(corpus_cases, round(t.case_budget_multiple * corpus_cases)),
                  spending_gamma=t.spending_gamma, resamples=t.bootstrap_resamples)


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


def specs(cls: ChangeClass | str, quality: QualityContract, task_base: Mapping[str, float],
          resolutions: Mapping[str, float], against_parent: bool, approximate_chain: bool = False,
          spreads: Mapping[str, Mapping[str, float]] | None = None) -> list[TestSpec]:
    """The tests of a class: each metric against the baseline (and the parent, for a quantization after a
    keep whose outputs are not the baseline's). A quantization is held to the resolution against its parent;
    against the original baseline too, unless the chain it builds on holds an approximate keep
    (`approximate_chain`): then the baseline test keeps the approximate margin, the budget of the whole chain.
    `spreads` (margin source -> metric -> floor, measured at baseline: quality_suite/margin_spread.py) sets each
    test's spread floor by where its margin comes from."""
    cls = ChangeClass.from_word(cls)
    if not cls.judged_on_the_task:
        return []
    own = margins(cls, quality, task_base, resolutions)
    if cls is not ChangeClass.QUANTIZATION or not against_parent:
        refs = {BASELINE: own}
    else:
        chain = margins(ChangeClass.APPROXIMATE, quality, task_base, resolutions) if approximate_chain else own
        refs = {BASELINE: chain, PARENT: own}
    out = []
    for name in task_base:
        metric = task_metrics.metric(name)
        out += [TestSpec(name, ref, m[name][0], m[name][1], metric.lower_is_better, metric.statistic,
                         (spreads or {}).get(m[name][1], {}).get(name, 0.0)) for ref, m in refs.items()]
    return out


def _no_cases(spec: TestSpec) -> TestResult:
    return TestResult(spec.metric, spec.reference, spec.margin, spec.margin_source, (), Decision.FAIL,
                      f"no case scored on both sides (the {spec.reference}'s scores are missing)")


def run(test_specs: Sequence[TestSpec], plan: Design, first: Block, first_cases: int,
        supply: CaseSupply | None = None) -> tuple[TestResult, ...]:
    """Every test over the first block's cases, then over doubling case sets while any is undecided and none
    failed, until the budget or the supply runs out."""
    tests = [SequentialTest(s, plan) for s in test_specs]
    cand, refs, count = first.cand, dict(first.refs), first_cases
    missing: list[TestResult] = []
    while True:
        extra = min(min(2 * count, plan.max_cases) - count, supply.available()) if supply is not None else 0
        for test in [t for t in tests if t.decision is Decision.MORE]:
            ref = refs.get(test.spec.reference, CaseScores())
            base, rows = ref.paired(cand, test.spec.metric)
            if not len(base):
                missing.append(_no_cases(test.spec))
                tests.remove(test)
                continue
            test.look(base, rows, last=extra <= 0)
        undecided = [t for t in tests if t.decision is Decision.MORE]
        if missing or any(t.decision is Decision.FAIL for t in tests) or not undecided or extra <= 0:
            break
        assert supply is not None
        block = supply.take(extra, tuple(dict.fromkeys(t.spec.reference for t in undecided)))
        cand = cand.plus(block.cand)
        for name, scores in block.refs.items():
            refs[name] = refs.get(name, CaseScores()).plus(scores)
        count += extra
    return tuple(t.result() for t in tests) + tuple(missing)
