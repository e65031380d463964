"""The eager power study's arithmetic (lab/studies/eager_power.py): the noise model's round sd, the layouts, the
balanced orders, the injected effect and the calibration's B; small sessions, no timing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dit_ar_contract.config import PerfProtocol
from lab.studies.eager_power import HostNoise, Levers, calibrated_bounds, log_ratios, rows, simulate

NOISE = HostNoise.fitted(0.18, 0.69)


def test_the_fitted_model_has_the_round_sd_it_was_fitted_to() -> None:
    assert NOISE.round_sd() == pytest.approx(0.18)
    r = log_ratios(4000, 1, Levers(rounds=16), NOISE, 0.0, np.random.default_rng(1))
    assert r.std() == pytest.approx(0.18, rel=0.03)
    with pytest.raises(ValueError, match="below the jitter"):
        HostNoise.fitted(0.01, 0.69)


def test_two_cores_cancel_nothing_of_the_host_state() -> None:
    """On two cores a round's sd is sqrt(2 (sd_h^2 + sd_e^2)); a pair's mean still wanders more than on one."""
    rng = np.random.default_rng(2)
    two = log_ratios(4000, 1, Levers(one_core=False), NOISE, 0.0, rng)
    assert two.std() == pytest.approx(math.sqrt(2 * (NOISE.sd_h ** 2 + NOISE.sd_e ** 2)), rel=0.03)
    one = log_ratios(4000, 1, Levers(), NOISE, 0.0, rng)
    assert one.std() < 0.6 * two.std() and one.mean(-1).std() < two.mean(-1).std()


def test_the_effect_and_the_offset_shift_every_round_and_orders_balance_the_drift() -> None:
    rng = np.random.default_rng(3)
    win = log_ratios(3000, 2, Levers(), NOISE, 10.0, rng)
    assert win.mean() == pytest.approx(math.log(0.9), abs=0.004)
    offset = HostNoise(NOISE.sd_h, NOISE.phi, NOISE.sd_e, sd_b=0.05)
    pairs = log_ratios(3000, 1, Levers(rounds=16), offset, 0.0, rng).mean(-1)
    plain = log_ratios(3000, 1, Levers(rounds=16), NOISE, 0.0, rng).mean(-1)
    assert pairs.var() - plain.var() == pytest.approx(0.05 ** 2, rel=0.15)
    longer = log_ratios(3000, 1, Levers(generates=2, rounds=8), NOISE, 0.0, rng)
    assert abs(longer.mean()) < 0.005  # a side's generates are summed, the orders still balance


def test_longer_calibration_pairs_give_a_smaller_bound() -> None:
    p, rng = PerfProtocol(), np.random.default_rng(4)
    short, _ = calibrated_bounds(400, Levers(cal_pairs=8), NOISE, p, rng)
    long, var = calibrated_bounds(400, Levers(cal_pairs=8, cal_rounds=48), NOISE, p, rng)
    assert np.median(long) < 0.8 * np.median(short)
    assert np.median(var) == pytest.approx(0.18 ** 2, rel=0.5)  # the trimmed mean's variance per round


def test_a_session_row_keeps_big_wins_and_no_no_op_and_the_table_starts_at_the_default() -> None:
    row = simulate(Levers(cal_pairs=8, cal_rounds=48), NOISE, 300, seed=5)
    assert row.keep[10.0] > 0.9 and row.keep[0.0] <= 0.02
    assert row.keep[5.0] < row.keep[10.0]
    assert set(row.predicted) == {10.0, 5.0} and abs(row.predicted[10.0] - row.keep[10.0]) < 0.15
    assert rows()[0] == Levers()
