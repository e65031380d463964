"""The verdict replayed on the noise it meets (lab/studies/simulation.py): the shipped CPU and GPU designs and the
concurrent-pairs design, judged by the same code as real experiments, keep no-ops at most alpha of the time
over all looks in every regime measured so far, and keep the wins the issue asks for where the machine is
quiet. The slow study with the full tables is lab/studies/verdict_study.py (docs/design/speed-verdict.md)."""

from __future__ import annotations

import math
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from dit_ar_contract.config import load_config
from lab.studies.simulation import (
    LAB_DATA,
    Gaussian,
    Regime,
    fixed_sample_power,
    pair_variance,
    regimes,
    run_oracle,
    simulate_session,
)
from perf_suite.sequential import KEEP, Design, OffsetBound, run_experiments

ALPHA = 0.01
PROJECT = Path(__file__).resolve().parents[2]
CONCURRENT = Design(pairs=8, rounds=36, first_look_rounds=4, look_every_rounds=2)


@lru_cache(maxsize=1)
def setting() -> tuple[dict[str, Regime], dict[str, Design]]:
    cfg = load_config(PROJECT / "config" / "autoresearch.json")
    designs = {"cpu": Design.from_protocol(cfg.lanes["embedded-cpu"].performance, "latency_ms"),
               "gpu": Design.from_protocol(cfg.lanes["dit-xl2-256"].performance, "latency_ms")}
    return regimes(LAB_DATA), designs


def keep_rate(regime: Regime, design: Design, bound_pct: float, effect: float, n: int, seed: int) -> float:
    last = design.schedule()[-1]
    r = regime.draw(np.random.default_rng(seed), (n, last.pairs, last.rounds), effect)
    return float(np.mean(run_experiments(r, design, math.log1p(bound_pct / 100)).decision == KEEP))


@pytest.mark.parametrize("regime,design,bound_pct", [
    ("cpu", "cpu", 2.5), ("cpu", "cpu", 1.5),  # the prior, and about what a session learns (1.8-2%)
    ("eager-h200", "gpu", 2.5), ("eager-h200", "gpu", 1.5),
    ("graph", "gpu", 0.1),  # B at its minimum: a graphed best learns ~0.14%
    ("mixed", "gpu", 0.14),  # an eager candidate judged with the B learned against a graphed best
    # the harness's own graphed best on the H200 (wave 6 calibration, 14 A/A pairs): its bound, and about what
    # a session of no-ops learns from it (0.8%)
    ("graph-h200", "gpu", 1.67), ("graph-h200", "gpu", 0.8),
    # a hand-captured CUDA graph best on the H200 (wave 10, 47 A/A pairs): the prior, and its calibration's bound
    ("hand-graph-h200", "gpu", 2.5), ("hand-graph-h200", "gpu", 0.44),
])
def test_no_op_keeps_stay_below_alpha_over_all_looks(regime: str, design: str, bound_pct: float) -> None:
    regs, designs = setting()
    seed = zlib.crc32(f"{regime}{bound_pct}".encode())
    rate = keep_rate(regs[regime], designs[design], bound_pct, 0.0, 1500, seed=seed)
    assert rate <= ALPHA, f"{regime}: {100 * rate:.2f}% of no-ops kept with B = {bound_pct}%"


def test_the_concurrent_design_holds_alpha_for_a_mixed_regime() -> None:
    regs, _ = setting()
    assert keep_rate(regs["mixed"], CONCURRENT, 0.14, 0.0, 400, seed=3) <= ALPHA


def test_a_session_learns_the_bound_per_best_and_still_keeps_no_no_op() -> None:
    """Six no-op experiments in a row against one best: B falls from the prior as spreads are pooled (a
    graphed best: to ~0.14%), and no experiment's false-keep rate exceeds alpha."""
    regs, designs = setting()
    rng = np.random.default_rng(9)
    for name, prior in (("graph", 2.5), ("eager-h200", 2.5)):
        out = simulate_session(regs[name], designs["gpu"], OffsetBound.of_pct(prior), [0.0] * 6, 150, rng)
        assert max(out.keep_rate(e) for e in range(6)) <= 2 * ALPHA  # 150 sessions: one keep is 0.7%
        assert np.median(out.bound_pct[:, 0]) == pytest.approx(prior)
        assert np.median(out.bound_pct[:, -1]) < (0.3 if name == "graph" else prior)


def test_where_the_machine_is_quiet_small_wins_are_kept() -> None:
    """Issue 20's goals for a CUDA-graphed best on the shipped GPU design: 3% kept >= 95%, 2.5% >= 80%
    (with the prior B, before the session has learned anything); the CPU lane keeps 5% wins, and where its
    rounds are dominated by something precise (the quiet regime on the CPU design) 3% wins, while no-ops stay
    at most alpha (the real run: docs/design/speed-verdict.md, "precise rounds on the CPU lane")."""
    regs, designs = setting()
    assert keep_rate(regs["graph"], designs["gpu"], 2.5, 3.0, 300, seed=4) >= 0.95
    assert keep_rate(regs["graph"], designs["gpu"], 2.5, 2.5, 300, seed=5) >= 0.80
    assert keep_rate(regs["cpu"], designs["cpu"], 2.0, 5.0, 300, seed=6) >= 0.80
    assert keep_rate(regs["graph"], designs["cpu"], 2.5, 3.0, 300, seed=16) >= 0.95
    assert keep_rate(regs["graph"], designs["cpu"], 2.5, 0.0, 1000, seed=17) <= ALPHA


def test_where_the_machine_is_noisy_large_wins_are_kept() -> None:
    """Eager H200 (fast/slow switching): 10% wins kept >= 99% and 5% wins >= 80% on the shipped GPU design
    (12 segments at most since wave 7; with 8 it kept 5% wins 73-81%, docs/design/speed-verdict.md)."""
    regs, designs = setting()
    assert keep_rate(regs["eager-h200"], designs["gpu"], 2.5, 10.0, 300, seed=7) >= 0.97
    assert keep_rate(regs["eager-h200"], designs["gpu"], 2.5, 5.0, 300, seed=14) >= 0.80
    assert keep_rate(regs["eager-h200"], CONCURRENT, 2.5, 5.0, 200, seed=8) >= 0.80


def test_the_harness_graphed_best_keeps_small_wins_with_its_calibrated_bound() -> None:
    """The H200's graphed best as the harness measures it (5% per-round noise, not the probe's 0.1%): with the
    bound of its calibration (1.67%) the shipped design keeps 3% wins >= 95% and 2.5% wins >= 80% (issue 20's
    bar; with 8 segments at most it kept 3% wins 92%, lab/notebook/design-decisions.md note 55), and 5% wins always."""
    regs, designs = setting()
    assert designs["gpu"].max_segments == 12
    assert keep_rate(regs["graph-h200"], designs["gpu"], 1.67, 3.0, 400, seed=11) >= 0.95
    assert keep_rate(regs["graph-h200"], designs["gpu"], 1.67, 2.5, 400, seed=15) >= 0.80
    assert keep_rate(regs["graph-h200"], designs["gpu"], 1.67, 5.0, 300, seed=12) >= 0.99
    assert keep_rate(regs["graph-h200"], CONCURRENT, 1.67, 3.0, 300, seed=13) >= 0.95


def test_a_hand_captured_graph_best_keeps_small_wins_and_discards_no_ops_in_one_pair() -> None:
    """The H200's quietest measured regime (a hand-captured CUDA graph best, wave 10: 0.2% between pairs,
    1.2-1.4% a round): 2.5% wins kept >= 80% even with the prior B, and with its calibrated bound (0.44%) a no-op
    is discarded after about one pair (docs/design/speed-verdict.md, "hand-captured CUDA graph best, H200, the
    harness's pairs")."""
    regs, designs = setting()
    gpu = designs["gpu"]
    hand = regs["hand-graph-h200"]
    assert keep_rate(hand, gpu, 2.5, 2.5, 300, seed=41) >= 0.80
    assert keep_rate(hand, gpu, 0.44, 3.0, 300, seed=42) >= 0.95
    last = gpu.schedule()[-1]
    res = run_experiments(hand.draw(np.random.default_rng(43), (500, last.pairs, last.rounds), 0.0), gpu,
                          math.log1p(0.44 / 100))
    assert res.rounds.mean() <= 1.5 * gpu.rounds
    assert np.mean(res.decision == KEEP) <= ALPHA


def test_an_eager_no_op_is_discarded_in_fewer_than_half_the_rounds_the_budget_allows() -> None:
    """The conditional-power stop (perf_suite.sequential.conditional_power): eager H200 no-ops averaged 139-154
    of 192 rounds without it (docs/design/speed-verdict.md), above the issue's 120 s; with it they end early while
    5% and 10% wins are still kept (the power asserts above use the same shipped design)."""
    regs, designs = setting()
    gpu = designs["gpu"]
    assert gpu.futility_power > 0
    last = gpu.schedule()[-1]
    r = regs["eager-h200"].draw(np.random.default_rng(31), (800, last.pairs, last.rounds), 0.0)
    res = run_experiments(r, gpu, math.log1p(2.5 / 100))
    assert res.rounds.mean() <= 0.5 * gpu.max_rounds
    assert np.mean(res.decision == KEEP) <= ALPHA


def test_the_oracle_knows_the_variance_and_holds_its_level_where_the_noise_is_normal() -> None:
    """The oracles the detection curve is held against (lab/studies/simulation.py): one z-test at level alpha has
    power alpha at no effect and more with more pairs; the shipped rule knowing V keeps no more than alpha of
    Gaussian no-ops and refuses the concurrent layout (it has no single pair variance)."""
    regs, designs = setting()
    gpu = designs["gpu"]
    assert fixed_sample_power(0.0, 1e-3, 4, ALPHA) == pytest.approx(ALPHA)
    assert fixed_sample_power(3.0, 1e-3, 8, ALPHA) > fixed_sample_power(3.0, 1e-3, 4, ALPHA)
    rng = np.random.default_rng(21)
    V = pair_variance(regs["graph-h200"], gpu.rounds, rng, n=20_000)
    assert 0.012 < math.sqrt(V) < 0.022  # the harness's graphed pairs: ~1.6% a pair, per-pair offset included
    normal = Regime("normal", "gaussian", 0.01, quiet=Gaussian(0.03))
    last = gpu.schedule()[-1]
    r = normal.draw(rng, (3000, last.pairs, last.rounds), 0.0)
    assert np.mean(run_oracle(r, gpu, pair_variance(normal, gpu.rounds, rng, n=20_000)).decision == KEEP) <= ALPHA
    with pytest.raises(ValueError, match="segments layout"):
        run_oracle(r, CONCURRENT, V)


def test_where_the_machine_is_noisy_the_detection_curve_is_near_the_oracles() -> None:
    """Issue 20: on the eager H200 lane the detection curve lies within 10 points of a test that knew the
    variance, on the same draws: the shipped rule with V known, and one z-test at the rounds the verdict used.
    With the B a session learns (1.8%; docs/design/speed-verdict.md); a fresh session's prior (2.5%) is up to 18 points
    below at 2.5-3% (the table there)."""
    regs, designs = setting()
    gpu, eager = designs["gpu"], regs["eager-h200"]
    rng = np.random.default_rng(22)
    V = pair_variance(eager, gpu.rounds, rng, n=50_000)
    last = gpu.schedule()[-1]
    for effect in (3.0, 5.0, 10.0):
        r = eager.draw(rng, (600, last.pairs, last.rounds), effect)
        shipped = run_experiments(r, gpu, math.log1p(1.8 / 100))
        kept = np.mean(shipped.decision == KEEP)
        oracle = np.mean(run_oracle(r, gpu, V).decision == KEEP)
        fixed = fixed_sample_power(effect, V, shipped.rounds.mean() / gpu.rounds, gpu.alpha)
        assert kept >= oracle - 0.10 and kept >= fixed - 0.10, (effect, kept, oracle, fixed)
