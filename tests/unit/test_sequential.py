"""The sequential decision: its boundaries hold alpha over all looks, it keeps clear wins early, stops
clear losers early, names an inconclusive result, and treats process offsets as noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perf_suite.sequential import Design, SequentialTest, boundaries, improvement_pct, spent

DESIGN = Design(alpha=0.01, min_improvement_pct=2.0, min_segments=2, max_segments=6, offset_floor_pct=1.0)


def segment(rng: np.random.Generator, effect: float, n: int = 8, noise: float = 0.03, offset_sd: float = 0.01,
            burst: float = 0.0) -> tuple[list[float], list[float]]:
    """Paired times: a shared per-round machine state, per-process offsets, per-side noise, optional bursts."""
    state = 0.3 * rng.choice([1.0, 1.0, 1.2, 1.5, 2.0], size=n)
    best = state * np.exp(rng.normal(0, offset_sd) + rng.normal(0, noise, n))
    cand = state * (1 - effect) * np.exp(rng.normal(0, offset_sd) + rng.normal(0, noise, n))
    if burst:  # one side alone hit by a burst now and then (another job grabbing the core)
        hit = rng.random(n) < burst
        cand = np.where(hit & (rng.random(n) < 0.5), cand * 3, cand)
        best = np.where(hit & (rng.random(n) >= 0.5), best * 3, best)
    return list(cand), list(best)


def run(rng: np.random.Generator, effect: float, design: Design = DESIGN, **kw) -> object:
    test = SequentialTest(design)
    while True:
        look = test.add(*segment(rng, effect, **kw))
        if look.final:
            return look


def test_boundaries_spend_exactly_alpha() -> None:
    looks = tuple(k / 6 for k in range(2, 7))
    c = boundaries(0.01, looks, 1.0)
    assert boundaries(0.01, (1.0,), 1.0)[0] == pytest.approx(2.326, abs=0.01)  # one look: the plain test
    rng = np.random.default_rng(0)
    paths = np.cumsum(rng.standard_normal((200_000, 6)) / math.sqrt(6), axis=1)
    crossed = np.zeros(len(paths), bool)
    for j, t in enumerate(looks):
        crossed |= paths[:, round(t * 6) - 1] / math.sqrt(t) <= -c[j]
    assert crossed.mean() == pytest.approx(0.01, abs=0.0015)
    assert spent(0.01, 1.0, 1.0) == pytest.approx(0.01) and spent(0.01, 0.5, 0.0) == pytest.approx(0.005)


def test_no_ops_are_kept_at_most_alpha_of_the_time_even_with_offsets_and_bursts() -> None:
    """Process offsets at the floor (0.7% per process = 1% between the two of a pair) and bursts."""
    rng = np.random.default_rng(1)
    kept = sum(run(rng, 0.0, offset_sd=0.007, burst=0.15).decision == "keep" for _ in range(2000))
    assert kept <= 30, f"{kept} of 2000 no-op experiments kept (alpha 1%; 3,000 runs gave 0.4%)"


def test_a_clear_win_is_kept_at_the_first_possible_look() -> None:
    look = run(np.random.default_rng(2), 0.10)
    assert look.decision == "keep" and look.segments == 2 and 7 < look.estimate_pct < 13
    assert look.lower_pct < look.estimate_pct < look.upper_pct and "faster" in look.reason


def test_a_huge_win_under_bursts_is_kept() -> None:
    """The case the block protocol threw away: a true ~77% win on a loaded machine (p=0.017 > alpha)."""
    look = run(np.random.default_rng(3), 0.77, noise=0.25, burst=0.3)
    assert look.decision == "keep" and look.estimate_pct > 60


def test_a_slower_candidate_stops_after_one_segment() -> None:
    look = run(np.random.default_rng(4), -0.10)
    assert look.decision == "not-faster" and look.segments == 1 and look.estimate_pct < -5
    assert "not faster by 2%" in look.reason


def test_an_unclear_small_effect_ends_inconclusive_with_its_interval() -> None:
    look = run(np.random.default_rng(5), 0.03, noise=0.30, offset_sd=0.02)
    assert look.decision in ("inconclusive", "not-faster", "keep")
    noisy = SequentialTest(Design(max_segments=2, min_segments=2, futility_z=5.0))
    rng = np.random.default_rng(6)
    noisy.add(*segment(rng, 0.03, noise=0.4))
    look = noisy.add(*segment(rng, 0.03, noise=0.4))
    assert look.decision == "inconclusive"
    assert look.reason.startswith(f"inconclusive after {look.rounds} rounds (2 segments):")
    assert f"[{look.lower_pct:+.2f}%, {look.upper_pct:+.2f}%]" in look.reason


def test_process_offsets_larger_than_the_floor_widen_the_interval() -> None:
    rng = np.random.default_rng(7)
    steady, offset = SequentialTest(DESIGN), SequentialTest(DESIGN)
    for _ in range(3):
        steady.add(*segment(rng, 0.0, noise=0.005, offset_sd=0.0))
        offset.add(*segment(rng, 0.0, noise=0.005, offset_sd=0.05))
    assert steady.current().offset_sd == pytest.approx(math.log1p(0.01))  # the floor
    assert offset.current().offset_sd > 0.02 and offset.current().standard_error > steady.current().standard_error


def test_improvement_follows_the_primary_metric() -> None:
    assert improvement_pct(math.log(0.8), "latency_ms") == pytest.approx(20.0)
    assert improvement_pct(math.log(0.8), "images_per_s") == pytest.approx(25.0)


def test_the_study_judges_both_protocols_on_the_same_segments() -> None:
    from dit_ar_contract.config import PerfProtocol
    from pytest_dit_ar.loop.study import new_protocol, old_protocol, summarize

    rng = np.random.default_rng(8)
    arms = {"null": [], "10": []}
    for arm, effect in (("null", 0.0), ("10", 0.10)):
        for _ in range(12):
            cand, best = segment(rng, effect, n=16)
            arms[arm].append({"cand_s": cand, "best_s": best})
    protocol = PerfProtocol()
    new = new_protocol(arms["10"], DESIGN, rounds=8)
    assert new and all(r["keep"] and r["rounds"] == 8 * r["segments"] for r in new)  # only the first 8 rounds
    old = old_protocol(arms["10"], protocol, "latency_ms", rounds=16)
    assert old and all(r["segments"] in (1, 2) and r["rounds"] == 16 * r["segments"] for r in old)
    summary = summarize(arms, protocol, "latency_ms", old_rounds=16, orders=50)
    assert summary["10"]["new"]["keep_rate"] == 1.0 and summary["null"]["new"]["keeps"] == 0
    assert summary["10"]["new"]["resampled"]["keep_rate"] == 1.0 and summary["null"]["new"]["resampled"]["orders"] == 50
    assert sum(r["segments"] for r in new_protocol(arms["null"], DESIGN, 8)) <= len(arms["null"])


def test_the_suggested_offset_floor_is_an_upper_bound_of_the_no_op_spread() -> None:
    from perf_suite.sequential import suggested_offset_floor_pct

    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(200):
        locations = list(rng.normal(0.0, 0.05, size=12))  # true between-process sd 5% (log scale)
        covered += suggested_offset_floor_pct(locations) >= 100 * math.expm1(0.05)
    assert 0.85 <= covered / 200 <= 0.95  # a 90% upper bound
    assert suggested_offset_floor_pct([0.01, -0.02]) is None  # too few no-op segments to say
