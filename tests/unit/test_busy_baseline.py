"""A baseline timed on a busy machine is stored with a warning that says how to retake it."""

from __future__ import annotations

from perf_suite.busy import MachineLoad, busy_signs, busy_warning


def quiet(**changes: float) -> MachineLoad:
    base = {"aa_pct": 0.8, "median_ms": 200.0, "p95_ms": 230.0, "load_average": 2.1, "cores": 2, "threads": 2}
    return MachineLoad(**{**base, **changes})


def test_a_quiet_baseline_gets_no_warning() -> None:
    assert busy_warning(quiet()) is None


def test_the_issue_figures_warn_and_name_the_command_that_retakes_it() -> None:
    warning = busy_warning(quiet(aa_pct=19.0, p95_ms=1800.0))  # A/A 19%, p95 nine times the median
    assert warning is not None
    assert "+19.0%" in warning and "9.0x the median" in warning
    assert "dit-ar init --tag NEW" in warning and "dit-ar baseline" in warning


def test_each_sign_alone_is_enough() -> None:
    assert len(busy_signs(quiet(aa_pct=-6.0))) == 1
    assert len(busy_signs(quiet(p95_ms=450.0))) == 1
    assert len(busy_signs(quiet(load_average=4.5))) == 1  # 2.5 runnable threads beyond the lane's own two
    assert busy_signs(quiet(load_average=2.9)) == []  # within one thread of the lane's own
