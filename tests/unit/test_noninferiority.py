"""The paired non-inferiority tests of task scores (quality_suite/noninferiority.py, task_tests.py): the spending
of alpha over looks, the bounds of a per-case and of a set metric, the decisions, and the sequence of looks over a
case supply. Pure functions on synthetic scores; the error rates they give are measured in lab/studies."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dit_ar_contract.config import load_config
from quality_suite import noninferiority as ni
from quality_suite import task_tests
from quality_suite.case_scores import CaseScores
from tests.helpers.loop import PROJECT

QUALITY = load_config(PROJECT / "config" / "autoresearch.json").lanes["embedded-cpu"].quality
FIGURES = task_tests.Figures({"judge_accuracy": 0.9}, {"judge_accuracy": 3e-5}, tolerances={"judge_accuracy": 1e-3})


# -- alpha spending ---------------------------------------------------------------------------------

@pytest.mark.parametrize("gamma", [-2.0, 0.0, 1.0, 2.0, 4.0])
def test_the_looks_of_a_full_schedule_spend_exactly_alpha(gamma: float) -> None:
    design = ni.Design(alpha=0.05, max_cases=200, spending_gamma=gamma)
    sizes = [40, 80, 160, 200]
    levels = [design.look_alpha(before, n) for before, n in zip([0, *sizes[:-1]], sizes)]
    assert sum(levels) == pytest.approx(0.05) and all(level > 0 for level in levels)
    assert design.spent(0) == 0 and design.spent(200) == pytest.approx(0.05) and design.spent(400) == design.spent(200)


def test_a_larger_gamma_spends_more_at_the_first_look() -> None:
    first = [ni.Design(alpha=0.05, max_cases=200, spending_gamma=g).look_alpha(0, 40) for g in (0.0, 2.0, 4.0)]
    assert first[0] == pytest.approx(0.01) and first[0] < first[1] < first[2] < 0.05


# -- one look ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("lower_is_better, base, cand, estimate", [
    (False, [0.9, 0.8, 1.0, 0.7], [0.8, 0.8, 0.9, 0.7], 0.05),   # higher is better: base - cand
    (True, [10.0, 12.0, 11.0, 9.0], [11.0, 12.5, 11.0, 9.5], 0.5),  # lower is better: cand - base
    (False, [0.5, 0.5, 0.5], [0.6, 0.7, 0.5], -0.1),  # an improvement is a negative degradation
])
def test_a_per_case_score_is_a_paired_mean_with_a_student_t_bound(lower_is_better: bool, base: list[float],
                                                                     cand: list[float], estimate: float) -> None:
    look = ni.mean_look(np.array(base), np.array(cand), lower_is_better, 0.05)
    d = np.array(cand) - np.array(base) if lower_is_better else np.array(base) - np.array(cand)
    assert look.estimate == pytest.approx(estimate)
    assert look.se == pytest.approx(d.std(ddof=1) / math.sqrt(len(d)))
    assert look.quantile == pytest.approx(stats.t.ppf(0.95, len(d) - 1))
    assert look.upper == pytest.approx(look.estimate + look.quantile * look.se)


def test_identical_outputs_have_zero_degradation_and_zero_spread() -> None:
    same = np.linspace(0.5, 1.0, 40)
    look = ni.mean_look(same, same.copy(), False, 0.01)
    assert look.estimate == 0 and look.se == 0 and look.upper == 0
    assert ni.decide(look, 3e-5, last=False)[0] is ni.Decision.PASS


def test_the_bootstrap_of_a_set_metric_pairs_the_cases() -> None:
    """With the mean as the 'set statistic' the bootstrap's standard error is the paired mean's (about): the
    resample is the same on both sides, so a shared per-case offset cancels."""
    rng = np.random.default_rng(1)
    shared = rng.normal(0.0, 5.0, size=(200, 1))  # large between-case spread, the same on both sides
    base = shared + rng.normal(0, 0.1, size=(200, 1))
    cand = shared + 0.3 + rng.normal(0, 0.1, size=(200, 1))

    def statistic(rows: np.ndarray) -> np.ndarray:
        return rows[..., 0].mean(axis=-1)

    look = ni.set_look(base, cand, statistic, True, 0.05, 2000, seed=3)
    d = (cand - base)[:, 0]
    assert look.estimate == pytest.approx(d.mean())
    assert look.se == pytest.approx(d.std(ddof=1) / math.sqrt(200), rel=0.15)  # not the unpaired 0.5
    assert look.quantile == pytest.approx(stats.norm.ppf(0.95))
    again = ni.set_look(base, cand, statistic, True, 0.05, 2000, seed=3)
    assert again == look  # a fixed seed: the same data give the same bound


@pytest.mark.parametrize("estimate, se, margin, last, decision", [
    (0.00, 0.01, 0.025, False, ni.Decision.PASS),   # bound 0.0196 <= 0.025
    (0.01, 0.01, 0.025, False, ni.Decision.MORE),   # bound 0.0296 > margin > lower -0.0096
    (0.01, 0.01, 0.025, True, ni.Decision.FAIL),    # undecided at the last look: not shown
    (0.05, 0.01, 0.025, False, ni.Decision.FAIL),   # lower bound 0.0304 > margin: a regression measured
    (0.025, 0.0, 0.025, False, ni.Decision.PASS),   # exactly at the margin with no spread
])
def test_decisions(estimate: float, se: float, margin: float, last: bool, decision: ni.Decision) -> None:
    look = ni.Look(40, estimate, se, 1.96, 0.025)
    got, why = ni.decide(look, margin, last)
    assert got is decision
    if decision is ni.Decision.FAIL:
        assert ("regression measured" in why) != last


def test_the_last_look_spends_what_is_left_even_before_the_budget() -> None:
    rng = np.random.default_rng(0)
    base = rng.uniform(0.8, 1.0, 80)
    cand = base - 0.02 + rng.normal(0, 0.05, 80)
    pair = {("judge_accuracy", "baseline"): task_tests.Paired(base, cand)}
    early = task_tests.judge_case_scores("approximate", {k: task_tests.Paired(v.base[:40], v.cand[:40])
                                                         for k, v in pair.items()}, QUALITY, FIGURES, 40,
                                         complete=False)
    assert early.decision is ni.Decision.MORE and early.needed == 80 and early.waiting == ("baseline",)
    [result] = task_tests.judge_case_scores("approximate", pair, QUALITY, FIGURES, 40).tests  # no more cases
    assert [look.n for look in result.looks] == [40, 80]
    assert result.alpha_spent() == pytest.approx(0.05) and result.decision is not ni.Decision.MORE
    assert ni.TestResult.from_dict(result.as_dict()) == result


# -- the gate's tests over a case supply ------------------------------------------------------------------

def scores(values: dict[str, float], metric: str = "judge_accuracy") -> CaseScores:
    return CaseScores({metric: {cid: np.asarray(v) for cid, v in values.items()}})


def wobble(i: int, sd: float) -> float:
    """+sd, -sd, +sd, ...: an even number of cases has mean 0 and standard deviation about sd."""
    return sd if i % 2 == 0 else -sd


class Supply:
    """Cases c40, c41, ... whose candidate scores are the baseline's minus `drop`, wobbling by +-sd."""

    def __init__(self, total: int, drop: float, sd: float) -> None:
        self.total, self.drop, self.sd, self.next = total, drop, sd, 40
        self.asked: list[tuple[int, tuple[str, ...]]] = []

    def available(self) -> int:
        return self.total - self.next

    def take(self, count: int, references: tuple[str, ...]) -> task_tests.Block:
        self.asked.append((count, references))
        ids = [f"c{i}" for i in range(self.next, self.next + count)]
        self.next += count
        base = {cid: 0.9 for cid in ids}
        cand = {cid: 0.9 - self.drop + wobble(i, self.sd) for i, cid in enumerate(ids)}
        return task_tests.Block(scores(cand), {ref: scores(base) for ref in references})


def first_block(drop: float, sd: float) -> task_tests.Block:
    ids = [f"c{i}" for i in range(40)]
    return task_tests.Block(scores({c: 0.9 - drop + wobble(i, sd) for i, c in enumerate(ids)}),
                            {"baseline": scores({c: 0.9 for c in ids})})


def run(first: task_tests.Block, supply: Supply | None, cls: str = "approximate",
        figures: task_tests.Figures = FIGURES, against_parent: bool = False) -> task_tests.Judgement:
    return task_tests.run(cls, QUALITY, figures, first, 40, supply, against_parent)


def test_an_undecided_test_adds_doubling_blocks_until_it_decides() -> None:
    supply = Supply(200, drop=0.0, sd=0.1)  # bound 0.034 over 40 cases, 0.026 over 80, 0.017 over 160
    judgement = run(first_block(0.0, 0.1), supply)
    [result] = judgement.tests
    assert task_tests.design(QUALITY, 40).max_cases == 200 and [look.n for look in result.looks] == [40, 80, 160]
    assert result.passed and judgement.decision is ni.Decision.PASS and judgement.cases == 160, result.describe()
    assert supply.asked == [(40, ("baseline",)), (80, ("baseline",))]


def test_a_longer_prefix_replays_the_same_earlier_looks() -> None:
    rng = np.random.default_rng(3)
    base = rng.uniform(0.8, 1.0, 200)
    cand = base - 0.015 + rng.normal(0, 0.06, 200)
    looks = []
    for n in (40, 80, 160, 200):
        pair = {("judge_accuracy", "baseline"): task_tests.Paired(base[:n], cand[:n])}
        looks.append(task_tests.judge_case_scores("approximate", pair, QUALITY, FIGURES, 40, complete=n == 200)
                     .tests[0].looks)
    assert all(longer[:len(shorter)] == shorter for shorter, longer in zip(looks, looks[1:]))
    assert [len(x) for x in looks] == [1, 2, 3, 3]  # decided at 160 cases: 200 cases replay the same three looks


def test_a_measured_regression_stops_at_the_first_look_and_an_unshown_one_fails_at_the_budget() -> None:
    [bad] = run(first_block(0.08, 0.02), Supply(200, 0.08, 0.02)).tests
    assert bad.decision is ni.Decision.FAIL and len(bad.looks) == 1 and "regression measured" in bad.reason
    supply = Supply(200, drop=0.025, sd=0.2)  # exactly at the margin, noisy: never shown
    [unsure] = run(first_block(0.025, 0.2), supply).tests
    assert not unsure.passed and unsure.last.n == 200 and unsure.alpha_spent() == pytest.approx(0.05)
    assert "not shown within the case budget" in unsure.reason


def test_quantization_tests_each_metric_against_the_baseline_and_the_parent_within_the_resolution() -> None:
    figures = task_tests.Figures({"judge_accuracy": 0.9, "frechet_distance": 15.0},
                                 {"judge_accuracy": 3e-5, "frechet_distance": 5e-4})
    plan = task_tests.design(QUALITY, 40)
    specs = task_tests.specs("quantization", QUALITY, figures, plan, against_parent=True)
    assert {(s.metric, s.reference, s.margin) for s in specs} == {
        ("judge_accuracy", "baseline", 3e-5), ("judge_accuracy", "parent", 3e-5),
        ("frechet_distance", "baseline", 5e-4), ("frechet_distance", "parent", 5e-4)}
    approx = {(s.metric, round(s.margin, 9), s.margin_source)
              for s in task_tests.specs("approximate", QUALITY, figures, plan, True)}
    assert approx == {("judge_accuracy", 0.025, "approximate margin"),
                      ("frechet_distance", 2.25, "approximate margin")}
    assert task_tests.specs("numerical", QUALITY, figures, plan, True) == []


def test_a_quantization_on_an_approximate_chain_keeps_the_chains_margin_against_the_baseline_only() -> None:
    plan = task_tests.design(QUALITY, 40)
    specs = task_tests.specs("quantization", QUALITY, FIGURES, plan, against_parent=True, approximate_chain=True)
    assert {(s.reference, s.margin, s.margin_source, s.rule.kind) for s in specs} == {
        ("baseline", 0.025, "approximate margin", "severe"), ("parent", 3e-5, "resolution", "tolerance")}
    # without the parent's outputs the chain's margin is never granted: the baseline test keeps the resolution
    alone = task_tests.specs("quantization", QUALITY, FIGURES, plan, against_parent=False, approximate_chain=True)
    assert [(s.reference, s.margin) for s in alone] == [("baseline", 3e-5)]
    # an int8-like loss of 4e-4 against the parent fails although the chain is within its budget of the baseline
    ids = [f"c{i}" for i in range(40)]
    block = task_tests.Block(scores({c: 0.9 - 0.0013 + wobble(i, 1e-4) for i, c in enumerate(ids)}),
                             {"baseline": scores({c: 0.9 for c in ids}), "parent": scores({c: 0.9 - 0.0009
                                                                                        for c in ids})})
    judgement = task_tests.run("quantization", QUALITY, FIGURES, block, 40, None, True, True)
    results = {r.reference: r for r in judgement.tests}
    assert judgement.decision is ni.Decision.FAIL and "regression measured" in results["parent"].reason
    assert results["baseline"].last.upper <= 0.025  # within the chain's margin, stopped by the parent's failure


def test_a_test_without_the_parents_scores_fails_and_says_so() -> None:
    judgement = run(first_block(0.0, 0.0), None, "quantization", against_parent=True)
    parent = next(r for r in judgement.tests if r.reference == "parent")
    assert not parent.passed and "parent's scores are missing" in parent.reason


def test_the_resolution_is_what_a_harmless_change_does_times_the_multiple_never_below_the_floor() -> None:
    ref = scores({f"c{i}": 0.9 for i in range(40)})
    wobble = scores({f"c{i}": 0.9 + (1e-3 if i == 0 else 0.0) for i in range(40)})  # mean moves by 2.5e-5
    res = task_tests.resolution(ref, [ref, wobble], {"judge_accuracy": 0.9}, multiple=4.0)
    assert res["judge_accuracy"] == pytest.approx(4 * 1e-3 / 40)
    still = task_tests.resolution(ref, [ref], {"judge_accuracy": 0.9}, multiple=4.0)
    assert still["judge_accuracy"] == pytest.approx(256 * 2.0 ** -23)


def test_case_scores_pair_by_id_append_blocks_and_round_trip_through_a_file(tmp_path) -> None:
    a = CaseScores({"m": {"x": np.array(1.0), "y": np.array(2.0)}, "f": {"x": np.ones(3)}})
    b = CaseScores({"m": {"y": np.array(5.0), "z": np.array(3.0)}})
    both = a.plus(b)
    assert both.ids("m") == ("x", "y", "z") and float(both.rows["m"]["y"]) == 2.0  # a case keeps its first row
    mine, theirs = b.paired(a, "m")
    assert mine.tolist() == [5.0] and theirs.tolist() == [2.0]
    a.save(tmp_path / "s.safetensors")
    back = CaseScores.load(tmp_path / "s.safetensors")
    assert back.ids("m") == ("x", "y") and back.rows["f"]["x"].tolist() == [1.0, 1.0, 1.0]
