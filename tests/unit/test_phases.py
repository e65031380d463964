"""The phase record (state/phases.py): the clock's names folded into one schema that sums to the total, read back
from the run record, and shown by `dit-ar summary --time`."""

from __future__ import annotations

import pytest

from pytest_dit_ar.state.phases import PhaseTimes

CLOCK = {"quality_worker_start": 21.6, "best_worker_start_not_overlapped": 0.0, "quality_corpus": 23.4,
         "quality_metrics": 3.3, "timing_startup": 2.5, "timing_fork_servers_wait": 0.04, "timing_warmup": 17.1,
         "timing_timed": 8.5, "timing_round_checks": 4.4, "timing_teardown": 2.8, "timing_fork_servers_close": 0.37,
         "harness_and_pytest": 8.1, "total": 92.2}


def test_the_clock_folds_into_phases_that_sum_to_the_total() -> None:
    p = PhaseTimes.from_clock(CLOCK, CLOCK["total"], warmup_rounds=31, warmup_reused=8)
    assert p.start_up == pytest.approx(21.6 + 2.5 + 0.04)
    assert p.quality_judging == pytest.approx(3.3) and p.close == pytest.approx(2.8 + 0.37)
    assert sum(p.seconds().values()) == pytest.approx(92.2)
    assert p.other == pytest.approx(92.2 - sum(v for k, v in CLOCK.items() if k not in ("total", "harness_and_pytest")))
    assert list(p.seconds()) == list(PhaseTimes.PHASES)


def test_a_run_that_stopped_before_timing_has_no_timing_phases() -> None:
    p = PhaseTimes.from_clock({"quality_worker_start": 3.0, "quality_corpus": 2.0}, 6.0)
    assert (p.warm_up, p.timed, p.other) == (0.0, 0.0, pytest.approx(1.0))


def test_the_record_reads_back_and_a_malformed_one_is_none() -> None:
    p = PhaseTimes.from_clock(CLOCK, 92.2, 31, 8, judging_reused=True)
    assert PhaseTimes.from_dict(p.as_dict()) == p
    assert PhaseTimes.from_dict(None) is None and PhaseTimes.from_dict({"timed": "fast"}) is None
    line = p.line()
    assert line.startswith("92.2 s: start up 24.1") and "31 warm-up rounds" in line
    assert "8 quality generates as warm-up" in line and "the best's quality judging" in line


def test_the_harness_guards_and_a_role_check_are_their_own_phase_and_an_older_record_reads_zero() -> None:
    clock = {**CLOCK, "harness_before": 1.5, "harness_after": 0.75, "role_check": 12.0}
    p = PhaseTimes.from_clock(clock, CLOCK["total"] + 14.25)
    assert p.harness == pytest.approx(14.25) and p.other == pytest.approx(
        PhaseTimes.from_clock(CLOCK, CLOCK["total"]).other)
    assert "harness 14.2" in p.line() and list(p.seconds())[-2:] == ["harness", "other"]
    older = {k: v for k, v in p.as_dict().items() if k != "harness"}  # recorded before the phase was named
    assert PhaseTimes.from_dict(older).harness == 0.0
