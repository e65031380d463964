"""What is timed is what is judged (loop/quality/timed.py): the timed rounds' outputs, handed on by the speed room,
scored on the task and tested against the best's; a FAIL measured on them fails the quality verdict
(loop/conclusion.py `quality_finding`), an undecided test does not. Stand-ins for the session and the task metric:
a case's score is its image's mean."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dit_ar_contract.config import load_config
from pytest_dit_ar.loop.conclusion import quality_finding
from pytest_dit_ar.loop.guards import outcomes as ran
from pytest_dit_ar.loop.quality import timed
from pytest_dit_ar.state.runs import ExperimentRecord
from pytest_dit_ar.state.timed_quality import FAIL, PASS, UNDECIDED, TimedQuality
from quality_suite import task_tests
from quality_suite.assessment import QualityAssessment
from quality_suite.case_scores import CaseScores
from quality_suite.corpora import load_corpus
from tests.helpers.loop import PROJECT

CONFIG = load_config(PROJECT / "config" / "autoresearch.json")
LANE = CONFIG.lanes["embedded-cpu"]
CORPUS = load_corpus(PROJECT / LANE.corpus)
JUDGE = "judge_accuracy"
FIGURES = task_tests.Figures({JUDGE: 0.95}, {JUDGE: 3.9e-5}, {"approximate margin": {JUDGE: 0.04},
                                                             "resolution": {JUDGE: 1.2e-4}}, {JUDGE: 1.6e-3})
SESSION = SimpleNamespace(lane=LANE, root=PROJECT)


@pytest.fixture(autouse=True)
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The judge's score of a case is its image's mean; the baseline's figures are FIGURES."""
    def scores_of(session, images, cases):  # noqa: ANN001, ANN202 - loop/quality/cases.py's signature
        return CaseScores({JUDGE: {c.id: np.float64(images[c.id].mean()) for c in cases}})

    monkeypatch.setattr(timed, "scores_of", scores_of)
    monkeypatch.setattr(timed, "figures", lambda base, quality: FIGURES)


def outputs(values: list[float]) -> SimpleNamespace:
    """A generate's outputs (worker.client.Generated's images): one image per value, filled with it."""
    return SimpleNamespace(images=torch.stack([torch.full((3, 4, 4), v) for v in values]))


def timed_rounds(rounds: int, cand_when_timed: float, limit: int = 200) -> timed.TimedCases:
    """`rounds` timed rounds of two requests each: the best scores 0.9 to 1.0 per case, the candidate as the best
    less `cand_when_timed`."""
    collect = timed.collector(SESSION, "approximate", CORPUS)  # type: ignore[arg-type]
    assert collect is not None
    collect.limit = limit
    rng = np.random.default_rng(2)
    for r in range(rounds):
        best = list(rng.uniform(0.9, 1.0, 2))
        requests = [[CORPUS[(2 * r) % 40].prompt, 1000 + 2 * r], [CORPUS[(2 * r + 7) % 40].prompt, 1001 + 2 * r]]
        collect(requests, outputs([b - cand_when_timed for b in best]), outputs(best))
    return collect


def test_the_collector_keeps_both_sides_with_the_corpus_label_up_to_the_budget() -> None:
    collect = timed_rounds(3, 0.0, limit=5)
    assert [c.id for c in collect.cases] == ["timed-1", "timed-2", "timed-3", "timed-4", "timed-5"]
    assert collect.cases[1].label == CORPUS[7].label and collect.cases[1].seed == 1001
    assert set(collect.cand) == set(collect.best) == {c.id for c in collect.cases}
    assert timed.collector(SESSION, "exact", CORPUS) is None  # type: ignore[arg-type] - pixel floors alone
    assert timed.collector(SESSION, "numerical", CORPUS) is None  # type: ignore[arg-type]
    set_only = SimpleNamespace(lane=SimpleNamespace(task_metrics=("frechet_distance",)))
    assert timed.collector(set_only, "approximate", CORPUS) is None  # type: ignore[arg-type] - no per-case metric


def test_a_candidate_worse_only_when_timed_fails_the_quality_finding() -> None:
    """Its corpus passed (the assessment has no failure); its timed outputs lose 0.3 of the judge's probability
    against the best's on the same requests: a regression measured on the timed cases."""
    judged = timed.judge(SESSION, timed_rounds(12, 0.3), "approximate", None, 40)  # type: ignore[arg-type]
    assert judged.decision == FAIL and judged.cases == 24 and judged.failed
    reason = judged.reasons[0]
    assert reason.startswith("timed rounds: judge_accuracy of the candidate against the best's outputs of the same 24 "
                             "timed cases (fresh seeds, both sides scored by the lane's task metrics)")
    assert "the candidate does something different when timed" in reason
    assert judged.tests[0].reference == timed.REFERENCE
    outcomes = ran.TestOutcomes(quality={"q": "passed"}, perf={"p": "passed"})
    passed = QualityAssessment("approximate", "approximate", (), {}, (), {}, {}, {})
    finding = quality_finding(outcomes, passed, None, judged)
    assert finding is not None and not finding.passed and finding.reasons == (reason,)
    assert quality_finding(outcomes, passed, None, None).passed  # the corpus alone passed


def test_a_faithful_candidate_is_undecided_on_few_timed_cases_and_does_not_fail() -> None:
    judged = timed.judge(SESSION, timed_rounds(12, 0.0), "approximate", None, 40)  # type: ignore[arg-type]
    assert judged.decision == UNDECIDED and not judged.reasons  # 24 cases < n_min 119: not shown, not failed
    outcomes = ran.TestOutcomes(quality={"q": "passed"}, perf={"p": "passed"})
    passed = QualityAssessment("approximate", "approximate", (), {}, (), {}, {}, {})
    assert quality_finding(outcomes, passed, None, judged).passed
    assert judged.lines()[-1] == "24 timed cases, both sides scored: undecided on the timed cases (reported; the " \
                                 "corpus tests decided)"
    many = timed.judge(SESSION, timed_rounds(100, 0.0), "approximate", None, 40)  # type: ignore[arg-type]
    assert many.decision == PASS and many.cases == 200  # the budget's cases: shown within the margin


def test_a_quantization_with_one_timed_case_beyond_tau_q_fails() -> None:
    collect = timed_rounds(12, 0.0)
    first = collect.cases[0].id
    collect.cand[first] = collect.cand[first] - 0.01  # one case moved beyond tau_q 1.6e-3 when timed
    judged = timed.judge(SESSION, collect, "quantization", None, 40)  # type: ignore[arg-type]
    assert judged.decision == FAIL and "1 case(s) lost more than tau_q" in judged.reasons[0]


def test_the_record_reads_back_from_experiment_json() -> None:
    judged = timed.judge(SESSION, timed_rounds(12, 0.3), "approximate", None, 40)  # type: ignore[arg-type]
    record = ExperimentRecord.from_dict({"timed_quality": judged.as_dict()})
    assert record.timed_quality == judged
    assert ExperimentRecord.from_dict({}).timed_quality is None
    assert TimedQuality.from_dict(None) is None
