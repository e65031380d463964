"""The retired block test (lab/studies/block_test.py) under bursty noise: A/A blocks are not kept, a clear win
is, pairing sees what an unpaired test cannot, and a win below the minimum improvement is not kept."""

from __future__ import annotations

import numpy as np

from lab.studies.block_test import decide_block

DECIDE = {"metric": "latency_ms", "min_improvement_pct": 2.0, "alpha": 0.01, "resamples": 2000}


def _bursty(rng: np.random.Generator, n: int, base: float = 0.1) -> np.ndarray:
    """Per-round machine state shared by both sides of a round: up to 2x bursts (MEASUREMENTS.md)."""
    return base * rng.choice([1.0, 1.0, 1.2, 1.5, 2.0], size=n)


def test_aa_noise_is_not_kept() -> None:
    rng = np.random.default_rng(1)
    kept = 0
    for _ in range(200):
        burst = _bursty(rng, 12)
        best = burst * rng.lognormal(0, 0.03, 12)
        cand = burst * rng.lognormal(0, 0.03, 12)
        kept += decide_block(list(cand), list(best), **{**DECIDE, "resamples": 300}).passes
    assert kept <= 2, f"{kept} of 200 identical A/A blocks were kept"


def test_clear_win_is_kept() -> None:
    rng = np.random.default_rng(2)
    burst = _bursty(rng, 12)
    best = burst * rng.lognormal(0, 0.03, 12)
    stats = decide_block(list(0.8 * best * rng.lognormal(0, 0.03, 12)), list(best), **DECIDE)
    assert stats.passes and 15 < stats.improvement_pct < 25
    assert stats.ci_upper_ratio < 1.0 and stats.p_value < 0.01


def test_pairing_sees_a_small_win_that_bursts_hide_from_mann_whitney() -> None:
    """A consistent 5% win under 2x round-to-round bursts: paired Wilcoxon finds it, unpaired MWU cannot."""
    rng = np.random.default_rng(3)
    burst = _bursty(rng, 12)
    best = burst * rng.lognormal(0, 0.005, 12)
    stats = decide_block(list(0.95 * best), list(best), **DECIDE)
    assert stats.p_value < 0.01 < stats.mwu_p_value
    assert stats.passes


def test_identical_or_slower_candidates_are_not_kept() -> None:
    best = [0.10, 0.12, 0.11, 0.10, 0.13, 0.10]
    same = decide_block(best, best, **DECIDE)
    assert same.p_value == 1.0 and not same.passes
    slower = decide_block([b * 1.1 for b in best], best, **DECIDE)
    assert slower.improvement_pct < 0 and not slower.passes


def test_small_but_significant_win_below_min_improvement_is_not_kept() -> None:
    rng = np.random.default_rng(4)
    best = _bursty(rng, 12) * rng.lognormal(0, 0.001, 12)
    stats = decide_block(list(0.99 * best), list(best), **DECIDE)
    assert stats.significant and not stats.passes
