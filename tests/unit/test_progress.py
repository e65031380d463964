"""The timing progress bar: rounds, the running estimate with its interval and the time left, on a terminal
only."""

from __future__ import annotations

import io

from perf_suite.sequential import Look
from pytest_dit_ar.loop.progress import TimingProgress


def look(final: bool) -> Look:
    return Look(segments=1, rounds=8, decision="keep" if final else "continue", estimate_pct=12.5, lower_pct=4.0,
                upper_pct=21.0, z=3.0, boundary=2.5, standard_error=0.04, offset_sd=0.01)


def test_on_a_terminal_the_bar_shows_rounds_estimate_interval_and_time_left() -> None:
    stream = io.StringIO()
    bar = TimingProgress(stream, True, rounds_per_segment=8, max_segments=4)
    for done in range(1, 9):
        bar.on_round(0, done, 8)
    bar.on_look(look(final=False))
    bar.on_round(1, 1, 8)
    text = stream.getvalue()
    assert "9/32" in text and "s left" in text and "+12.5% [+4.0%, +21.0%]" in text
    bar.on_look(look(final=True))


def test_off_a_terminal_it_writes_nothing() -> None:
    stream = io.StringIO()
    bar = TimingProgress(stream, False, rounds_per_segment=8, max_segments=4)
    bar.on_round(0, 1, 8)
    bar.on_look(look(final=True))
    assert stream.getvalue() == ""
