"""The tests' spread floor (quality_suite/noninferiority.py, margin_spread.py): the standard error is never below
the at-margin spread over sqrt(n), the floor is measured from blends of the baseline's images at the margin, stored
with the baseline, chosen by where a test's margin comes from, printed on the test line, and a baseline that stores
none is refused. Arithmetic only: the false-pass rates it gives are measured in lab/studies/quality_simulation.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dit_ar_contract.errors import Refused
from quality_suite import calibration, margin_spread, task_tests
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


def test_a_sequential_test_uses_its_specs_floor_and_the_floor_survives_the_record() -> None:
    spec = ni.TestSpec("judge_accuracy", "baseline", 0.0125, "approximate margin", spread=0.05)
    test = ni.SequentialTest(spec, ni.Design(alpha=0.05, max_cases=200))
    base, cand = skewed()
    test.look(base, cand, last=False)
    result = test.result()
    assert result.last.floor_se == pytest.approx(0.05 / math.sqrt(40))
    assert ni.TestResult.from_dict(result.as_dict()) == result
    old = result.as_dict()
    for look in old["looks"]:
        del look["floor_se"]  # a quality.json written before the floor
    assert ni.TestResult.from_dict(old).last.floor_se == 0.0


def test_each_test_takes_the_floor_measured_at_its_own_margin() -> None:
    spreads = {"approximate margin": {"judge_accuracy": 0.04}, "resolution": {"judge_accuracy": 2e-4}}
    base, res = {"judge_accuracy": 0.9}, {"judge_accuracy": 3e-5}
    approx = task_tests.specs("approximate", QUALITY, base, res, False, spreads=spreads)
    quant = task_tests.specs("quantization", QUALITY, base, res, True, spreads=spreads)
    chain = task_tests.specs("quantization", QUALITY, base, res, True, approximate_chain=True, spreads=spreads)
    assert [s.spread for s in approx] == [0.04]
    assert [(s.reference, s.spread) for s in quant] == [("baseline", 2e-4), ("parent", 2e-4)]
    assert [(s.reference, s.margin_source, s.spread) for s in chain] == [
        ("baseline", "approximate margin", 0.04), ("parent", "resolution", 2e-4)]
    assert [s.spread for s in task_tests.specs("approximate", QUALITY, base, res, False)] == [0.0]


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
    spreads = margin_spread.measure(images, cases, 40, score, margins)
    for source, margin in (("approximate margin", 0.05), ("resolution", 0.005)):
        s = spreads[source]["judge_accuracy"]
        assert s.margin == margin and s.cases == 80 and 0 < s.weight < 1
        assert s.degradation == pytest.approx(margin, rel=0.1)
        b, c = score(images).paired(score(calibration.blend(images, cases, s.weight)), "judge_accuracy")
        assert s.spread == pytest.approx((b - c).std(ddof=1) * margin / s.degradation)
    record = margin_spread.as_record(spreads)
    assert margin_spread.floors(record) == {k: {"judge_accuracy": v["judge_accuracy"].spread}
                                            for k, v in spreads.items()}
    assert margin_spread.floors({}) is None and margin_spread.floors(None) is None


def test_the_spread_of_a_per_case_score_is_scaled_to_the_margin() -> None:
    base = np.array([1.0, 1.0, 1.0, 1.0])
    cand = np.array([1.0, 1.0, 1.0, 0.6])  # degradation 0.1 on average
    sd = np.array([0.0, 0.0, 0.0, 0.4]).std(ddof=1)
    assert margin_spread.spread_of("judge_accuracy", base, cand, 0.05, 0.1) == pytest.approx(sd / 2)


# -- old baselines and the test line ----------------------------------------------------------------

def reference(spread: dict | None) -> BaselineReference:
    evidence = AuditEvidence.from_dict({})
    return BaselineReference(Outputs({}, {}, evidence), {}, {"judge_accuracy": 0.9}, {}, {}, {"judge_accuracy": 3e-5},
                             spread)


@pytest.mark.parametrize("cls", ["approximate", "quantization"])
def test_a_baseline_without_the_floor_is_refused_with_the_command_that_takes_a_fresh_one(cls: str) -> None:
    with pytest.raises(Refused, match=r"dit-ar init --tag NEW.*dit-ar baseline"):
        _tests(cls, {}, reference(None), [], QUALITY, ("judge_accuracy",), None, TaskInputs())  # type: ignore[arg-type]
    assert _tests("exact", {}, reference(None), [], QUALITY, ("judge_accuracy",), None,  # type: ignore[arg-type]
                  TaskInputs()) == ()


def test_the_test_line_prints_the_standard_error_and_the_floor() -> None:
    spec = ni.TestSpec("judge_accuracy", "baseline", 0.025, "approximate margin", spread=0.05)
    test = ni.SequentialTest(spec, ni.Design(alpha=0.05, max_cases=200))
    test.look(*skewed(), last=True)
    line = QualityAssessment.test_text(test.result())
    floor = 0.05 / math.sqrt(40)
    assert f"se {floor:.2g}, at-margin floor {floor:.2g}]" in line
    assert line.startswith("judge_accuracy vs baseline: degradation +0.0005 [upper bound +")


def test_the_baseline_summary_stores_the_spread_and_an_old_one_reads_as_none() -> None:
    from pytest_dit_ar.state.baseline import BaselineSummary, BaselineTiming

    cases, images = pool()
    record = margin_spread.as_record(margin_spread.measure(images, cases, 40, judge_like(images),
                                                           {"resolution": {"judge_accuracy": 0.005}}))
    summary = BaselineSummary("embedded-cpu", "embedded-cpu", "a" * 40, "r0", "", (), "", {}, {}, {}, {}, {}, {}, {},
                              BaselineTiming(), task_spread=record)
    again = BaselineSummary.from_dict(summary.as_dict())
    assert again.task_spread == record
    assert margin_spread.floors(again.task_spread)["resolution"]["judge_accuracy"] == record["resolution"][
        "judge_accuracy"]["spread"] > 0
    old = summary.as_dict()
    del old["task_spread"]
    assert margin_spread.floors(BaselineSummary.from_dict(old).task_spread) is None


def test_a_set_metric_gets_no_floor_but_the_record_still_says_the_floor_was_measured() -> None:
    cases, images = pool()

    def score(imgs: dict[str, torch.Tensor]) -> CaseScores:
        return CaseScores({"frechet_distance": {c: i.reshape(-1)[:3].double().numpy() for c, i in imgs.items()}})

    record = margin_spread.as_record(margin_spread.measure(images, cases, 40, score,
                                                           {"resolution": {"frechet_distance": 0.1}}))
    assert record == {"resolution": {}}
    assert margin_spread.floors(record) == {"resolution": {}}  # not None: this baseline is not refused
    spec = task_tests.specs("quantization", QUALITY, {"frechet_distance": 15.0}, {"frechet_distance": 0.03}, False,
                            spreads=margin_spread.floors(record))
    assert [s.spread for s in spec] == [0.0]


def test_the_reports_test_table_shows_the_standard_error_and_the_floor() -> None:
    from pytest_dit_ar.report.page import _tests_table

    spec = ni.TestSpec("judge_accuracy", "baseline", 0.025, "approximate margin", spread=0.05)
    test = ni.SequentialTest(spec, ni.Design(alpha=0.05, max_cases=200))
    test.look(*skewed(), last=True)
    quality = QualityAssessment("approximate", "approximate", (), {}, (), {}, {}, {}, task_tests=(test.result(),))
    table = _tests_table(quality)
    assert table is not None and table.header[5:7] == ("se", "at-margin floor")
    se, floor = table.rows[0].cells[5:7]
    assert se == floor != ""


def test_a_calibration_session_takes_the_floor_its_own_cases_give() -> None:
    rng = np.random.default_rng(3)
    ids = [f"c{i}" for i in range(200)]
    base = rng.uniform(0.9, 1.0, 200)
    heavy = np.where(rng.random(200) < 0.05, 0.4, 0.002)  # a skewed loss, about 0.022 on average
    as_scores = lambda v: CaseScores({"judge_accuracy": dict(zip(ids, (np.asarray(x) for x in v)))})  # noqa: E731
    blocks = [ids[i:i + 40] for i in range(0, 200, 40)]
    spec = ni.TestSpec("judge_accuracy", "baseline", 0.025, "approximate margin")
    at_margin = as_scores(base - heavy)
    [with_floor] = calibration.floored([spec], as_scores(base), at_margin, blocks)
    measured = calibration.block_degradation("judge_accuracy", as_scores(base), at_margin, blocks)
    assert with_floor.spread == pytest.approx(heavy.std(ddof=1) * 0.025 / measured)
    design = ni.Design(alpha=0.05, max_cases=200)
    cand = as_scores(base - 0.001)
    order = [2, 0, 4, 1, 3]
    assert calibration.session([spec], design, as_scores(base), cand, blocks, order, at_margin) == \
        calibration.session([with_floor], design, as_scores(base), cand, blocks, order)
