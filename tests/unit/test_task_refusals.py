"""What a task-score refusal says (quality_suite/refusal.py): the metric, reference and figures that failed, the case
budget and its key, whether more cases could pass it at all and the class's claim; and the lanes whose case budget
cannot pass a class (doctor, scaffold, the experiment's refusal)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dit_ar_contract.config import load_config
from dit_ar_contract.errors import Refused
from pytest_dit_ar.cli.doctor_budget import case_budget_lines
from pytest_dit_ar.loop.guards.checks import check_case_budget
from quality_suite import gates, refusal, task_metrics, task_tests
from quality_suite.assessment import QualityAssessment, refusals_of
from quality_suite.corpora import load_corpus
from tests.helpers.loop import PROJECT

CONFIG = load_config(PROJECT / "config" / "autoresearch.json")
QUALITY = CONFIG.lanes["embedded-cpu"].quality
JUDGE = "judge_accuracy"
FIGURES = task_tests.Figures({JUDGE: 0.95}, {JUDGE: 3.9e-5}, {"approximate margin": {JUDGE: 0.04},
                                                             "resolution": {JUDGE: 1.2e-4}}, {JUDGE: 1.6e-3})
KEY = f"lanes.embedded-cpu.{refusal.BUDGET_KEY}"


def judged(cls: str, loss: np.ndarray, n: int, quality=QUALITY) -> tuple:  # noqa: ANN001 - a QualityContract
    base = np.random.default_rng(5).uniform(0.6, 1.0, n)
    pair = {(JUDGE, task_tests.BASELINE): task_tests.Paired(base, base - loss[:n])}
    j = task_tests.judge_case_scores(cls, pair, quality, FIGURES, 40)
    return j, refusals_of(j.tests, quality, 40, KEY)


def test_a_regression_says_more_cases_cannot_pass_it_with_the_budget_and_the_claim() -> None:
    j, (r,) = judged("approximate", np.full(200, 0.2), 40)
    assert j.decision is task_tests.Decision.FAIL and r.estimate > r.margin
    line = r.line()
    assert line.startswith("judge_accuracy vs baseline: a regression measured")
    assert "vs the approximate margin 0.025" in line and "one-sided bound" in line and "over 40 cases" in line
    assert "the estimate itself is above the margin: more cases cannot pass it" in line and r.cases_needed is None
    assert f"the case budget is 200 cases (5 x the 40-case corpus, `{KEY}`)" in line
    assert "the approximate claim: no worse at the task (judge_accuracy) than the original baseline by more than the " \
           "margin 0.025, and at most m/R = 2.5% of cases ruined" in line
    assert refusal.GUIDE in line and refusal.GUIDE == "docs/guide/reading-a-verdict.md"
    assert (PROJECT / refusal.GUIDE).is_file()


def test_a_bound_not_shown_within_the_budget_says_how_many_cases_would_be() -> None:
    rng = np.random.default_rng(9)
    loss = rng.normal(0.018, 0.06, 200)  # below the margin on average, too noisy for 200 cases
    j, refusals = judged("approximate", loss, 200)
    assert j.decision is task_tests.Decision.FAIL and len(refusals) == 1
    r = refusals[0]
    assert r.estimate < r.margin < r.upper and r.cases == 200
    half, room = r.upper - r.estimate, r.margin - r.estimate
    assert r.cases_needed == max(200, math.ceil(200 * (half / room) ** 2)) > 200
    assert f"the bound falls about {refusal.SHRINK_PER_DOUBLING * half:.2g} per doubling of the cases" in r.outlook
    assert f"about {r.cases_needed} cases would be needed, the budget is 200" in r.outlook
    assert f"raise it to {math.ceil(r.cases_needed / 40):g} for {r.cases_needed} cases" in r.line()


def test_a_quantization_beyond_tau_q_cannot_pass_and_says_its_tolerance_claim() -> None:
    loss = np.zeros(200)
    loss[3] = 0.01  # one case beyond tau_q 1.6e-3
    j, (r,) = judged("quantization", loss, 40)
    assert "1 case(s) beyond tau_q already break the claim: more cases cannot pass it" in r.outlook
    assert "the quantization claim: the mean judge_accuracy within the resolution" in r.claim
    assert "at most p0 = 1.49% of the cases moved by more than tau_q 0.0016" in r.claim


def test_a_lane_whose_budget_is_below_n_min_says_the_budget_it_needs() -> None:
    small = dataclasses.replace(QUALITY, noninferiority=dataclasses.replace(QUALITY.noninferiority,
                                                                            case_budget_multiple=2.0))
    j, (r,) = judged("approximate", np.zeros(200), 40, small)
    assert "the case budget 80 is below n_min 119" in r.why and r.cases_needed == 119 and r.raise_to() == 3
    assert "about 119 cases would be needed, the budget is 80" in r.outlook
    line = r.line()
    assert "the case budget is 80 cases (2 x the 40-case corpus" in line and "raise it to 3 for 119 cases" in line


def test_the_verdict_line_of_a_failed_test_is_its_refusal() -> None:
    j, refusals = judged("approximate", np.full(200, 0.2), 40)
    check = gates.test_check(j.tests[0])
    quality = QualityAssessment("approximate", "approximate", (), {}, (check,), {}, {}, {}, task_tests=j.tests,
                                refusals=refusals)
    assert quality.reasons() == [refusals[0].line()]
    back = QualityAssessment.from_dict(json.loads(json.dumps(quality.as_dict())))
    assert back.refusals == refusals and back.as_dict()["refusals"][0]["line"] == refusals[0].line()


def test_a_test_stopped_by_another_s_failure_gets_no_refusal() -> None:
    stopped = task_tests.TestResult(JUDGE, "parent", 3.9e-5, "resolution", (), task_tests.Decision.FAIL,
                                    task_tests.STOPPED)
    assert refusal.explain(stopped, task_tests.design(QUALITY, 40), 40, 5.0, KEY) is None


# -- lanes whose budget cannot pass a class ---------------------------------------------------------------------

PER_CASE = [n for n, m in task_metrics.REGISTRY.items() if m.statistic is None]


@pytest.mark.parametrize("lane", sorted(CONFIG.lanes))
def test_every_shipped_lane_can_pass_both_classes_with_its_per_case_metrics(lane: str) -> None:
    """The lane's own per-case metrics, and every per-case metric it could be given (a GPU lane's corpus has 18
    cases: its budget multiple of 12 holds n_pass = 200)."""
    node = CONFIG.lanes[lane]
    corpus = len(load_corpus(PROJECT / node.corpus))
    own = [n for n in node.task_metrics if n in PER_CASE]
    assert task_tests.budget_shortfall(node.quality, corpus, own) == []
    assert task_tests.budget_shortfall(node.quality, corpus, ["classifier_top1", JUDGE], None) == []


def test_doctor_names_a_lane_whose_budget_is_short(tmp_path: Path) -> None:
    assert not any("cannot pass" in line for line in case_budget_lines(CONFIG))
    short = dataclasses.replace(CONFIG.lanes["dit-xl2-256"], task_metrics=("classifier_top1",),
                                quality=dataclasses.replace(QUALITY, noninferiority=QUALITY.noninferiority))
    config = dataclasses.replace(CONFIG, lanes={"dit-xl2-256": short})
    lines = case_budget_lines(config)
    assert lines[0].startswith("lane dit-xl2-256: case budget 90 (5 x the 18-case corpus)")
    assert ("  - lane dit-xl2-256 cannot pass a quantization change of classifier_top1: its test needs n_pass = 200 "
            "cases, the case budget is 90 (5 x the 18-case corpus); set "
            "lanes.dit-xl2-256.quality.noninferiority.case_budget_multiple to at least 12") in lines


def test_an_approximate_experiment_on_a_short_lane_is_refused_before_it_runs() -> None:
    small = dataclasses.replace(QUALITY, noninferiority=dataclasses.replace(QUALITY.noninferiority,
                                                                            case_budget_multiple=2.0))
    lane = dataclasses.replace(CONFIG.lanes["embedded-cpu"], quality=small)
    session = SimpleNamespace(lane=lane, root=PROJECT, best=lambda: None)
    with pytest.raises(Refused, match=r"cannot pass an approximate change of judge_accuracy: its test needs n_min = "
                                      r"119 cases, the case budget is 80 .*case_budget_multiple to at least 3; "
                                      r"nothing ran"):
        check_case_budget(session, "approximate", {JUDGE: 0.95})  # type: ignore[arg-type]
    check_case_budget(session, "exact", {JUDGE: 0.95})  # type: ignore[arg-type] - an exact change: nothing to refuse
    full = SimpleNamespace(lane=CONFIG.lanes["embedded-cpu"], root=PROJECT, best=lambda: None)
    check_case_budget(full, "quantization", {JUDGE: 0.95})  # type: ignore[arg-type]
