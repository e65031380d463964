"""The tests' spread floor (quality_suite/noninferiority.py, margin_spread.py): the standard error is never below
the at-margin spread over sqrt(n), the floor is measured from blends of the baseline's images at the margin (a quantile
of a prompt-stratified bootstrap of their CV) and tau_q from its 8-bit images, both stored with the baseline, the floor
chosen by where a test's margin comes from and printed on the test line, and a baseline that stores neither is
refused. Arithmetic only: the false-pass rates it gives are measured in lab/studies/quality_simulation.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dit_ar_contract.classes import ChangeClass
from dit_ar_contract.errors import Refused
from quality_suite import calibration, margin_spread, pool_sessions, task_tests
from quality_suite import noninferiority as ni
from quality_suite.assessment import BaselineReference, Outputs, QualityAssessment, TaskInputs, _tests
from quality_suite.audit import AuditEvidence
from quality_suite.case_scores import CaseScores
from quality_suite.corpora import Case
from tests.unit.test_noninferiority import QUALITY


def skewed(n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Most cases lose nothing, one loses 0.2: a small mean and a small sample spread."""
    base = np.full(n, 0.95)
    cand = base.copy()
    cand[0] -= 0.02
    return base, cand


def test_the_floor_sets_the_standard_error_when_the_samples_spread_is_smaller() -> None:
    base, cand = skewed()
    plain = ni.mean_look(base, cand, False, 0.02)
    floored = ni.mean_look(base, cand, False, 0.02, spread=0.05)
    assert plain.se < 0.05 / math.sqrt(40) and not plain.floored
    assert floored.se == pytest.approx(0.05 / math.sqrt(40)) and floored.floor_se == floored.se and floored.floored
    assert floored.estimate == plain.estimate and floored.quantile == plain.quantile
    assert floored.upper == pytest.approx(plain.estimate + plain.quantile * 0.05 / math.sqrt(40))
    assert ni.decide(plain, 0.0125, last=False)[0] is ni.Decision.PASS  # the sample alone passes it ...
    assert ni.decide(floored, 0.0125, last=False)[0] is ni.Decision.MORE  # ... the floor asks for more cases


def test_a_larger_sample_spread_still_governs() -> None:
    rng = np.random.default_rng(1)
    base = rng.uniform(0.8, 1.0, 80)
    cand = base - rng.normal(0.0, 0.2, 80)
    look = ni.mean_look(base, cand, False, 0.02, spread=0.01)
    d = base - cand
    assert look.se == pytest.approx(d.std(ddof=1) / math.sqrt(80)) and not look.floored
    assert look.floor_se == pytest.approx(0.01 / math.sqrt(80))


def test_the_floor_of_a_set_metric_bounds_the_bootstraps_standard_error() -> None:
    rng = np.random.default_rng(2)
    base = rng.normal(size=(40, 3))
    cand = base + rng.normal(0, 1e-3, size=(40, 3))

    def stat(rows: np.ndarray) -> np.ndarray:
        return np.atleast_3d(rows).mean(axis=(-2, -1)) if np.ndim(rows) == 3 else np.atleast_1d(rows.mean())

    plain = ni.set_look(base, cand, stat, True, 0.02, 100, 0)
    floored = ni.set_look(base, cand, stat, True, 0.02, 100, 0, spread=1.0)
    assert floored.estimate == plain.estimate and floored.se == pytest.approx(1 / math.sqrt(40))
    assert plain.se < floored.se and floored.floored and not plain.floored


def judged(base: np.ndarray, cand: np.ndarray, floor: float, margin_source: str = "approximate margin",
           complete: bool = True) -> ni.TestResult:
    """The approximate test of judge_accuracy over these cases, with a spread floor at its margin."""
    figures = task_tests.Figures({"judge_accuracy": 0.9}, {"judge_accuracy": 3e-5}, {margin_source: {
        "judge_accuracy": floor}}, {"judge_accuracy": 1e-3})
    pair = {("judge_accuracy", "baseline"): task_tests.Paired(base, cand)}
    return task_tests.judge_case_scores("approximate", pair, QUALITY, figures, len(base), complete).tests[0]


def test_a_test_uses_its_floor_and_the_floor_survives_the_record() -> None:
    base, cand = skewed()
    result = judged(base, cand, 0.05, complete=False)
    assert result.last.floor_se == pytest.approx(0.05 / math.sqrt(40))
    assert ni.TestResult.from_dict(result.as_dict()) == result
    old = result.as_dict()
    for look in old["looks"]:
        del look["floor_se"]  # a quality.json written before the floor
    assert ni.TestResult.from_dict(old).last.floor_se == 0.0


def test_each_test_takes_the_floor_measured_at_its_own_margin() -> None:
    spreads = {"approximate margin": {"judge_accuracy": 0.04}, "resolution": {"judge_accuracy": 2e-4}}
    base, res = {"judge_accuracy": 0.9}, {"judge_accuracy": 3e-5}
    plan = task_tests.design(QUALITY, 40)
    figures = task_tests.Figures(base, res, spreads, {"judge_accuracy": 1e-3})
    approx = task_tests.specs("approximate", QUALITY, figures, plan, False)
    quant = task_tests.specs("quantization", QUALITY, figures, plan, True)
    chain = task_tests.specs("quantization", QUALITY, figures, plan, True, approximate_chain=True)
    assert [s.spread for s in approx] == [0.04]
    assert [(s.reference, s.spread) for s in quant] == [("baseline", 2e-4), ("parent", 2e-4)]
    assert [(s.reference, s.margin_source, s.spread) for s in chain] == [
        ("baseline", "approximate margin", 0.04), ("parent", "resolution", 2e-4)]
    assert [s.spread for s in task_tests.specs("approximate", QUALITY, task_tests.Figures(base, res), plan,
                                               False)] == [0.0]


# -- the measurement at baseline ---------------------------------------------------------------------

def pool(n: int = 80) -> tuple[list[Case], dict[str, torch.Tensor]]:
    cases = [Case(f"c{i}", f"prompt {i % 10}", i, i % 10) for i in range(n)]
    rng = torch.Generator().manual_seed(0)
    images = {c.id: torch.rand(1, 4, 4, generator=rng) * (0.2 if i % 8 else 1.0) for i, c in enumerate(cases)}
    return cases, images


def judge_like(originals: dict[str, torch.Tensor]):
    """A per-case score the tests read as judge_accuracy (higher is better): minus each image's mean distance to
    the case's original image, so a blend degrades it case by case."""

    def score(images: dict[str, torch.Tensor]) -> CaseScores:
        return CaseScores({"judge_accuracy": {cid: np.asarray(-float((img - originals[cid]).abs().mean()))
                                              for cid, img in images.items()}})
    return score


def test_the_spread_is_measured_where_the_blend_degrades_the_score_by_the_margin() -> None:
    cases, images = pool()
    margins = {"approximate margin": {"judge_accuracy": 0.05}, "resolution": {"judge_accuracy": 0.005}}
    score = judge_like(images)
    measured = margin_spread.measure(images, cases, 40, score, margins, multiple=4.0)
    for source, margin in (("approximate margin", 0.05), ("resolution", 0.005)):
        s = measured.spreads[source]["judge_accuracy"]
        assert s.margin == margin and s.cases == 80 and 0 < s.weight < 1 and s.quantile == 0.75
        assert s.degradation == pytest.approx(margin, rel=0.1)
        b, c = score(images).paired(score(calibration.blend(images, cases, s.weight)), "judge_accuracy")
        d = b - c
        assert s.point == pytest.approx(d.std(ddof=1) / d.mean() * margin)
        assert (s.point, s.spread) == margin_spread.floor_of(d, [c.prompt for c in cases], margin)
    eight_bit = score(margin_spread.rounded_to_8_bits(images))
    b, c = score(images).paired(eight_bit, "judge_accuracy")
    tau = measured.tolerances["judge_accuracy"]
    assert tau.largest == pytest.approx(np.abs(b - c).max()) and tau.tolerance == pytest.approx(4 * tau.largest)
    record = margin_spread.as_record(measured)
    assert margin_spread.floors(record) == {k: {"judge_accuracy": v["judge_accuracy"].spread}
                                            for k, v in measured.spreads.items()}
    assert margin_spread.tolerances(record) == {"judge_accuracy": tau.tolerance}
    assert margin_spread.floors({}) is None and margin_spread.floors(None) is None


def test_the_floor_is_a_quantile_of_a_bootstrap_of_the_cv_stratified_by_prompt() -> None:
    strata = [f"p{i % 7}" for i in range(70)]
    idx = margin_spread.stratified_resamples(strata, 50, seed=1)
    assert idx.shape == (50, 70)
    assert all(sorted(strata[i] for i in row) == sorted(strata) for row in idx)  # each prompt keeps its count
    d = np.where(np.arange(70) % 10 == 0, 0.3, 0.01)  # a skewed loss: CV about 2.4
    point, floor = margin_spread.floor_of(d, strata, 0.025)
    assert point == pytest.approx(d.std(ddof=1) / d.mean() * 0.025)
    rows = d[margin_spread.stratified_resamples(strata, margin_spread.FLOOR_RESAMPLES)]
    cv = rows.std(axis=1, ddof=1) / rows.mean(axis=1)
    assert floor == pytest.approx(np.quantile(cv, margin_spread.FLOOR_QUANTILE) * 0.025)
    assert floor > point  # the 75th percentile lies above the plain estimate here


# -- old baselines and the test line ----------------------------------------------------------------

def reference(spread: dict | None, tolerance: dict | None = None) -> BaselineReference:
    evidence = AuditEvidence.from_dict({})
    return BaselineReference(Outputs({}, {}, evidence), {}, {"judge_accuracy": 0.9}, {}, {}, {"judge_accuracy": 3e-5},
                             spread, tolerance)


@pytest.mark.parametrize("cls", ["approximate", "quantization"])
def test_a_baseline_without_the_floor_is_refused_with_the_command_that_takes_a_fresh_one(cls: str) -> None:
    with pytest.raises(Refused, match=r"dit-ar init --tag NEW.*dit-ar baseline"):
        _tests(cls, {}, reference(None), [], QUALITY, ("judge_accuracy",), None, TaskInputs())  # type: ignore[arg-type]
    no_tau = reference({"approximate margin": {"judge_accuracy": 0.04}, "resolution": {"judge_accuracy": 1e-4}})
    with pytest.raises(Refused, match="tau_q"):
        _tests(cls, {}, no_tau, [], QUALITY, ("judge_accuracy",), None, TaskInputs())  # type: ignore[arg-type]
    assert _tests("exact", {}, reference(None), [], QUALITY, ("judge_accuracy",), None,  # type: ignore[arg-type]
                  TaskInputs()) == ()


def test_the_test_line_prints_the_standard_error_and_the_floor() -> None:
    line = QualityAssessment.test_text(judged(*skewed(), 0.05))
    floor = 0.05 / math.sqrt(40)
    assert f"se {floor:.2g}, at-margin floor {floor:.2g}]" in line
    assert line.startswith("judge_accuracy vs baseline: degradation +0.0005 [upper bound +")


def test_the_baseline_summary_stores_the_spread_and_an_old_one_reads_as_none() -> None:
    from pytest_dit_ar.state.baseline import BaselineSummary, BaselineTiming

    cases, images = pool()
    record = margin_spread.as_record(margin_spread.measure(images, cases, 40, judge_like(images),
                                                           {"resolution": {"judge_accuracy": 0.005}}, 4.0))
    summary = BaselineSummary("embedded-cpu", "embedded-cpu", "a" * 40, "r0", "", (), "", {}, {}, {}, {}, {}, {}, {},
                              BaselineTiming(), task_spread=record)
    again = BaselineSummary.from_dict(summary.as_dict())
    assert again.task_spread == record
    assert margin_spread.floors(again.task_spread)["resolution"]["judge_accuracy"] == record["resolution"][
        "judge_accuracy"]["spread"] > 0
    assert margin_spread.tolerances(again.task_spread)["judge_accuracy"] > 0
    old = summary.as_dict()
    del old["task_spread"]
    assert margin_spread.floors(BaselineSummary.from_dict(old).task_spread) is None
    # a baseline of the plain floor (no quantile, no tau_q) is of the old kind: refused
    plain = {"resolution": {"judge_accuracy": {k: v for k, v in record["resolution"]["judge_accuracy"].items()
                                               if k not in ("point", "quantile")}}}
    assert margin_spread.floors(plain) is None and margin_spread.tolerances(plain) is None


def test_a_set_metric_gets_no_floor_but_the_record_still_says_the_floor_was_measured() -> None:
    cases, images = pool()

    def score(imgs: dict[str, torch.Tensor]) -> CaseScores:
        return CaseScores({"frechet_distance": {c: i.reshape(-1)[:3].double().numpy() for c, i in imgs.items()}})

    record = margin_spread.as_record(margin_spread.measure(images, cases, 40, score,
                                                           {"resolution": {"frechet_distance": 0.1}}, 4.0))
    assert record == {"resolution": {}, "tolerance": {}}
    assert margin_spread.floors(record) == {"resolution": {}}  # not None: this baseline is not refused
    figures = task_tests.Figures({"frechet_distance": 15.0}, {"frechet_distance": 0.03},
                                 margin_spread.floors(record), margin_spread.tolerances(record))
    spec = task_tests.specs("quantization", QUALITY, figures, task_tests.design(QUALITY, 40), False)
    assert [(s.spread, s.rule) for s in spec] == [(0.0, None)]


def test_the_reports_test_table_shows_the_standard_error_and_the_floor() -> None:
    from pytest_dit_ar.report.page import _tests_table

    quality = QualityAssessment("approximate", "approximate", (), {}, (), {}, {}, {},
                                task_tests=(judged(*skewed(), 0.05),))
    table = _tests_table(quality)
    assert table is not None and table.header[5:7] == ("se", "at-margin floor")
    se, floor = table.rows[0].cells[5:7]
    assert se == floor != ""


def test_a_calibration_session_takes_the_floor_and_tau_q_its_own_cases_give() -> None:
    rng = np.random.default_rng(3)
    ids = [f"c{i}" for i in range(400)]
    base = rng.uniform(0.9, 1.0, 400)
    heavy = np.where(rng.random(400) < 0.05, 0.4, 0.002)  # a skewed loss, about 0.022 on average
    as_scores = lambda v: CaseScores({"judge_accuracy": dict(zip(ids, (np.asarray(x) for x in v)))})  # noqa: E731
    blocks = [ids[i:i + 40] for i in range(0, 400, 40)]
    prompts = {c: f"p{i % 40}" for i, c in enumerate(ids)}
    harness = pool_sessions.Pool("judge_accuracy", as_scores(base), blocks, 0.95, 3e-5, as_scores(base - heavy),
                                 as_scores(base + rng.normal(0, 1e-4, 400)), prompts)
    order = [2, 0, 4, 1, 3]
    session_ids = [cid for k in order for cid in blocks[k]]
    figures = harness.figures(ChangeClass.APPROXIMATE, QUALITY, session_ids)
    own = [ids.index(c) for c in session_ids]
    _, floor = margin_spread.floor_of(heavy[own], [f"p{i % 40}" for i in own], 0.025)
    assert figures.spreads == {"approximate margin": {"judge_accuracy": floor}}
    other = harness.figures(ChangeClass.APPROXIMATE, QUALITY, [cid for k in (5, 6, 7, 8, 9) for cid in blocks[k]])
    assert other.spreads != figures.spreads  # each session's baseline measures its own
    cand = as_scores(base - 0.001)
    assert pool_sessions.session("approximate", QUALITY, harness, cand, order) == (True, 160)
