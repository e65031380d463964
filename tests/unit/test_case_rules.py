"""The case-count conditions of the task-score tests (quality_suite/case_rules.py, task_tests.judge_case_scores): no
PASS before n_min or n_pass cases, the severe-case bound of the approximate claim, the per-case tolerance tau_q of
the quantization claim on every case seen, the figures each test line prints, the Frechet distance reported and not
gated, and the lanes whose case budget cannot pass a class."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from dit_ar_contract.config import load_config
from quality_suite import case_rules, gates, task_tests
from quality_suite import noninferiority as ni
from quality_suite.assessment import QualityAssessment
from quality_suite.case_scores import CaseScores
from tests.helpers.loop import PROJECT

QUALITY = load_config(PROJECT / "config" / "autoresearch.json").lanes["embedded-cpu"].quality
JUDGE = "judge_accuracy"
FIGURES = task_tests.Figures({JUDGE: 0.95}, {JUDGE: 3.9e-5}, {"approximate margin": {JUDGE: 0.04},
                                                             "resolution": {JUDGE: 1.2e-4}}, {JUDGE: 1.6e-3})


def judge(cls: str, base: np.ndarray, cand: np.ndarray, first: int = 40, complete: bool = True,
          figures: task_tests.Figures = FIGURES) -> task_tests.Judgement:
    pair = {(JUDGE, task_tests.BASELINE): task_tests.Paired(np.asarray(base, float), np.asarray(cand, float))}
    return task_tests.judge_case_scores(cls, pair, QUALITY, figures, first, complete)


def test_n_min_is_the_information_bound_of_the_margin() -> None:
    assert case_rules.n_min(0.05, 0.025, 1.0) == 119  # ln 0.05 / ln 0.975 = 118.3
    assert (1 - 0.025) ** 119 <= 0.05 < (1 - 0.025) ** 118
    assert case_rules.n_min(0.05, 0.025, 2.0) == 239 and case_rules.n_min(0.05, 2.0, 1.0) == 1
    assert case_rules.p0(0.05, 200) == pytest.approx(1 - 0.05 ** (1 / 200)) == pytest.approx(0.01487, abs=1e-5)
    assert case_rules.cp_upper(0, 160, 0.025) == pytest.approx(1 - 0.025 ** (1 / 160))
    assert case_rules.cp_upper(3, 100, 0.05) == pytest.approx(stats.beta.ppf(0.95, 4, 97))


@pytest.mark.parametrize("n", [1, 2, 10, 40, 80, 100, 118])
def test_fewer_than_n_min_cases_that_lose_nothing_never_pass(n: int) -> None:
    """A zero-loss sample of n < n_min cases cannot tell a harmless change from one that ruins m / R of the cases:
    whatever the look schedule, the bound or the floor, it is not PASS."""
    base = np.linspace(0.9, 1.0, n)
    for first in sorted({1, n // 2 or 1, n}):
        for floor in (0.0, 0.04):
            figures = dataclasses.replace(FIGURES, spreads={"approximate margin": {JUDGE: floor}})
            verdict = judge("approximate", base, base.copy(), first=first, figures=figures)
            assert verdict.decision is ni.Decision.FAIL, (n, first, floor)
            assert "n_min" in verdict.tests[0].reason or "budget" in verdict.tests[0].reason


def test_a_change_that_loses_nothing_passes_at_the_first_look_past_n_min() -> None:
    base = np.linspace(0.9, 1.0, 200)
    verdict = judge("approximate", base, base.copy())
    assert verdict.decision is ni.Decision.PASS and verdict.cases == 160
    [test] = verdict.tests
    assert [look.passable for look in test.looks] == [False, False, True]
    assert test.rule.min_cases == 119 and test.rule.level == pytest.approx(0.025)  # alpha / 2 looks that may pass


def test_one_severe_case_in_160_fails_the_severe_case_bound_at_a_margin_of_0_025() -> None:
    base = np.full(160, 0.95)
    cand = base.copy()
    cand[100] = 0.4  # one case loses 0.55 > tau = 0.5: its mean loss is 0.0034, far within the margin
    verdict = judge("approximate", base, cand)
    [test] = verdict.tests
    assert verdict.decision is ni.Decision.FAIL and test.last.upper < 0.025  # the mean alone would pass
    assert test.last.beyond == 1 and "severe" in test.reason
    assert test.rule.share_bound(1, 160) > 0.025 and test.rule.share_bound(1, 200) > 0.025  # hopeless at the budget
    mild = base.copy()
    mild[100] = 0.5  # a loss of 0.45 is not severe: the sample passes
    assert judge("approximate", base, mild).decision is ni.Decision.PASS


def test_a_classifier_case_is_severe_when_its_margin_changes_sign() -> None:
    rule = case_rules.severe_rule(0.05, 0.025, 2.0, 0.5, True, (40, 80, 160, 200))
    base, cand = np.array([0.3, 0.01, -0.2, 0.9]), np.array([0.25, -0.01, -0.9, 0.1])
    assert rule.beyond(base - cand, base, cand).tolist() == [False, True, False, False]
    assert rule.min_cases == 239 and rule.limit == pytest.approx(0.0125)


def test_a_quantization_fails_on_a_case_beyond_tau_q_also_among_the_further_cases() -> None:
    base = np.linspace(0.9, 1.0, 200)
    cand = base - 1e-6  # every case within tau_q, the mean within the resolution
    assert judge("quantization", base, cand).decision is ni.Decision.PASS
    beyond = cand.copy()
    beyond[150] = base[150] - 2e-3  # an extension case (past the 40-case corpus) beyond tau_q 1.6e-3
    verdict = judge("quantization", base, beyond)
    [test] = verdict.tests
    assert verdict.decision is ni.Decision.FAIL and test.last.n == 160 and test.last.beyond == 1
    assert "tau_q" in test.reason
    # through the harness's loop over a case supply: the case comes in the third block
    ids = [f"c{i}" for i in range(200)]
    scores = lambda v: CaseScores({JUDGE: dict(zip(ids, (np.asarray(x) for x in v)))})  # noqa: E731

    class Supply:
        used = 40

        def available(self) -> int:
            return 200 - self.used

        def take(self, count: int, references: tuple[str, ...]) -> task_tests.Block:
            block = ids[self.used:self.used + count]
            self.used += len(block)
            return task_tests.Block(scores(beyond).select(block), {r: scores(base).select(block) for r in references})

    first = task_tests.Block(scores(beyond).select(ids[:40]), {task_tests.BASELINE: scores(base).select(ids[:40])})
    looped = task_tests.run("quantization", QUALITY, FIGURES, first, 40, Supply())
    assert looped.tests == verdict.tests


def test_no_quantization_passes_before_n_pass_cases() -> None:
    base = np.linspace(0.9, 1.0, 200)
    for n in (40, 80, 160, 199):
        verdict = judge("quantization", base[:n], base[:n].copy())
        assert verdict.decision is ni.Decision.FAIL and "n_pass" in verdict.tests[0].reason, n


def test_every_test_line_prints_the_bound_the_case_count_and_its_condition() -> None:
    base = np.linspace(0.9, 1.0, 200)
    [approx] = judge("approximate", base, base - 0.001).tests
    line = QualityAssessment.test_text(approx)
    assert "upper bound" in line and "severe cases (loss > 0.5) 0 of 160 [bound 2.28% <= 2.5%], n_min 119" in line
    assert line.endswith(": PASS")
    [quant] = judge("quantization", base, base.copy()).tests
    line = QualityAssessment.test_text(quant)
    assert "beyond tau_q 0.0016: 0 of 200 (p0 1.49%), n_pass 200" in line and line.endswith(": PASS")
    record = quant.as_dict()
    assert record["rule"]["min_cases"] == 200 and record["case_condition"]["share_bound"] == pytest.approx(
        case_rules.p0(0.05, 200))
    assert ni.TestResult.from_dict(record) == quant
    old = approx.as_dict()
    del old["rule"], old["gated"], old["case_condition"]
    for look in old["looks"]:
        del look["beyond"], look["passable"]
    assert ni.TestResult.from_dict(old).rule is None  # a quality.json written before the conditions loads
    check = gates.test_check(approx)
    assert "severe cases" in check.message and check.passed


def test_the_frechet_distance_is_reported_not_gated() -> None:
    rng = np.random.default_rng(0)
    base = np.linspace(0.9, 1.0, 200)
    rows = rng.normal(size=(200, 64))  # the judge's feature rows
    figures = dataclasses.replace(FIGURES, task_base={JUDGE: 0.95, "frechet_distance": 15.0},
                                  resolutions={JUDGE: 3.9e-5, "frechet_distance": 0.03})
    pairs = {(JUDGE, "baseline"): task_tests.Paired(base, base.copy()),
             ("frechet_distance", "baseline"): task_tests.Paired(rows, rows + 5.0)}  # far worse: still not gated
    verdict = task_tests.judge_case_scores("approximate", pairs, QUALITY, figures, 40)
    assert verdict.decision is ni.Decision.PASS and [t.metric for t in verdict.tests] == [JUDGE]
    [fd] = verdict.reported
    assert not fd.gated and fd.decision is ni.Decision.REPORTED and fd.last.n == verdict.cases == 160
    assert "reported, not gated" in QualityAssessment.test_text(fd)
    checks = gates.aggregate_checks("approximate", {}, QUALITY, {JUDGE: 0.95, "frechet_distance": 20.0},
                                    {JUDGE: 0.95, "frechet_distance": 15.0}, {"frechet_distance"},
                                    task_tests=verdict.results)
    assert [c.name for c in checks] == [JUDGE] and all(c.passed for c in checks)
    alone = gates.aggregate_checks("approximate", {}, QUALITY, {"frechet_distance": 15.0},
                                   {"frechet_distance": 15.0}, {"frechet_distance"}, task_tests=(fd,))
    assert [c.name for c in alone if not c.passed] == ["task_tests"]  # a set metric alone cannot pass a class


def test_a_budget_below_n_min_or_n_pass_is_named() -> None:
    assert task_tests.budget_shortfall(QUALITY, 40, ["judge_accuracy", "frechet_distance"]) == []
    small = task_tests.budget_shortfall(QUALITY, 18, ["judge_accuracy", "frechet_distance"])
    assert small == [("judge_accuracy", "approximate", 119, 90), ("judge_accuracy", "quantization", 200, 90)]
    margins = dataclasses.replace(QUALITY.approximate, task_margin={"clip_score": 0.5, "classifier_top1": 0.025})
    quality = dataclasses.replace(QUALITY, approximate=margins)
    names = ["clip_score", "classifier_top1"]
    without = {(s.metric, s.cls): s.needed for s in task_tests.budget_shortfall(quality, 40, names)}
    assert without[("clip_score", "approximate")] == case_rules.n_min(0.05, 0.5, case_rules.CLIP_RANGE) == 598
    assert without[("classifier_top1", "approximate")] == 239 and ("clip_score", "quantization") not in without
    known = task_tests.budget_shortfall(quality, 40, names, {"clip_score": 30.0})
    assert ("clip_score", "approximate") not in {(s.metric, s.cls) for s in known}  # n_min 179 with R = 30
    assert math.ceil(math.log(0.05) / math.log(1 - 0.5 / 30)) == 179
