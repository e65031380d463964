"""The quality simulation's arithmetic (lab/studies/quality_simulation.py): its look schedule is the gate's, its
cached sessions decide as the product's task_tests.run does, and the test it runs keeps its false-pass rate on a
synthetic pool. Fast: per-case scores only, no images."""

from __future__ import annotations

import numpy as np
import pytest

from lab.studies.quality_simulation import Engine, schedule
from quality_suite import calibration
from quality_suite import noninferiority as ni
from quality_suite.case_scores import CaseScores

BLOCKS, CASES = 20, 40


def pool(drop: float, sd: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.8, 1.0, BLOCKS * CASES)
    return base, base - drop + rng.normal(0.0, sd, base.shape)


def as_scores(values: np.ndarray, metric: str = "m") -> CaseScores:
    return CaseScores({metric: {f"c{i}": np.asarray(v) for i, v in enumerate(values)}})


def test_the_schedule_is_the_gates_doubling_looks() -> None:
    assert schedule(40, 200, 40) == [1, 2, 4, 5]
    assert schedule(18, 90, 18) == [1, 2, 4, 5]
    assert schedule(40, 40, 40) == [1]


@pytest.mark.parametrize("drop, sd", [(0.0, 0.05), (0.025, 0.08), (0.05, 0.05), (0.02, 0.3)])
def test_cached_sessions_decide_as_the_products_test(drop: float, sd: float) -> None:
    base, cand = pool(drop, sd)
    spec = ni.TestSpec("m", "baseline", 0.025, "approximate margin")
    design = ni.Design(alpha=0.05, max_cases=200)
    blocks = np.arange(BLOCKS * CASES).reshape(BLOCKS, CASES)
    engine = Engine(spec, design, base, cand, blocks)
    ids = [[f"c{i}" for i in row] for row in blocks]
    rng = np.random.default_rng(7)
    for _ in range(40):
        order = rng.permutation(BLOCKS)[:5]
        product = calibration.session([spec], design, as_scores(base), as_scores(cand), ids, list(order))
        assert engine.session(order) == product, order


def test_a_change_exactly_at_the_margin_passes_at_most_alpha() -> None:
    base, noisy = pool(0.0, 0.1, seed=3)
    noise = noisy - base
    cand = base - 0.025 - (noise - noise.mean())  # the pool's mean degradation is exactly the margin
    spec = ni.TestSpec("m", "baseline", 0.025, "approximate margin")
    engine = Engine(spec, ni.Design(alpha=0.05, max_cases=200), base, cand, np.arange(800).reshape(20, 40))
    rate = engine.rate(2000, np.random.default_rng(1))
    assert rate.rate <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 2000), rate
    worse = Engine(spec, engine.design, base, cand - 0.025, engine.blocks).rate(2000, np.random.default_rng(2))
    assert worse.rate <= rate.rate and worse.mean_cases < rate.mean_cases  # twice the margin: refused sooner
    harmless = Engine(spec, engine.design, base, cand + 0.025, engine.blocks).rate(2000, np.random.default_rng(4))
    assert harmless.rate >= 0.9, harmless  # no degradation on average: shown non-inferior


def test_sessions_with_the_spread_floor_decide_as_the_products_test_with_that_floor() -> None:
    import dataclasses

    base, cand = pool(0.01, 0.02)
    _, at_margin = pool(0.025, 0.1, seed=5)
    spec = ni.TestSpec("judge_accuracy", "baseline", 0.025, "approximate margin")
    design = ni.Design(alpha=0.05, max_cases=200)
    blocks = np.arange(BLOCKS * CASES).reshape(BLOCKS, CASES)
    engine = Engine(spec, design, base, cand, blocks, at_margin)
    ids = [[f"c{i}" for i in row] for row in blocks]
    rng = np.random.default_rng(9)
    for _ in range(20):
        order = rng.permutation(BLOCKS)[:5]
        floor = engine.spread(tuple(sorted(int(b) for b in order)))
        assert floor > 0.05
        floored = dataclasses.replace(spec, spread=floor)
        product = calibration.session([floored], design, as_scores(base, "judge_accuracy"),
                                      as_scores(cand, "judge_accuracy"), ids, list(order))
        assert engine.session(order) == product, order
