"""Live progress: on a terminal a bar (rounds, the running estimate with its interval, the time left); in a pipe
one line per phase and per timed segment; inside pytest written past the output capture."""

from __future__ import annotations

import contextlib
import io

from perf_suite.sequential import Look
from pytest_dit_ar.loop.speed.progress import TimingProgress
from pytest_dit_ar.loop.workers.live import Live
from pytest_dit_ar.plugin.terminal import ReporterStream


def look(final: bool, segments: int = 1) -> Look:
    return Look(segments=segments, rounds=8 * segments, decision="keep" if final else "continue", estimate_pct=12.5,
                lower_pct=4.0, upper_pct=21.0, z=3.0, boundary=2.5, standard_error=0.04, offset_sd=0.01)


def test_on_a_terminal_the_bar_shows_rounds_estimate_interval_and_time_left() -> None:
    stream = io.StringIO()
    bar = TimingProgress(stream, True, rounds_per_segment=8, max_segments=4)
    assert stream.getvalue() == ""  # no "0/32" while the quality run goes on: the bar starts with the rounds
    for done in range(1, 9):
        bar.on_round(0, done, 8)
    bar.on_look(look(final=False))
    bar.on_round(1, 1, 8)
    text = stream.getvalue()
    assert "9/32" in text and "s left" in text and "+12.5% [+4.0%, +21.0%]" in text
    assert "dit-ar: timing:" not in text  # a bar, not lines
    bar.on_look(look(final=True))


def test_in_a_pipe_the_timing_writes_one_line_per_segment() -> None:
    stream = io.StringIO()
    bar = TimingProgress(stream, False, rounds_per_segment=8, max_segments=4)
    for done in range(1, 9):
        bar.on_round(0, done, 8)
    bar.on_look(look(final=False))
    bar.on_round(1, 1, 8)
    bar.on_look(look(final=True, segments=2))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3 and all(line.startswith("dit-ar: timing: ") for line in lines)
    assert "up to 32 paired rounds" in lines[0]
    assert "segment 1 done" in lines[1] and "+12.5% [+4.0%, +21.0%]" in lines[1]
    assert "segment 2 done" in lines[2] and lines[2].endswith("; keep")
    assert "\r" not in stream.getvalue()


def test_without_a_stream_it_writes_nothing() -> None:
    bar = TimingProgress(None, False, rounds_per_segment=8, max_segments=4)
    bar.on_round(0, 1, 8)
    bar.on_look(look(final=True))


def test_in_a_pipe_each_phase_is_one_line_and_a_phase_bar_adds_nothing() -> None:
    stream = io.StringIO()
    live = Live(stream, tty=False)
    live.phase("quality: starting the candidate's worker")
    bar = live.bar("quality: candidate corpus", 48, "case")
    for _ in range(24):
        bar.update(2)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].startswith("dit-ar: [") and lines[1].endswith("candidate corpus: 48 cases")


def test_on_a_terminal_a_phase_gets_a_bar() -> None:
    stream = io.StringIO()
    bar = Live(stream, tty=True).bar("baseline corpus", 48, "case")
    bar.update(12)
    bar.refresh()
    assert "12/48" in stream.getvalue()
    bar.close()


class Reporter:
    def __init__(self, capture: list[bool]):
        self.capture, self.lines, self.newlines = capture, [], 0

    def ensure_newline(self) -> None:
        self.newlines += 1

    def write(self, text: str, flush: bool = False) -> None:
        self.lines.append((text, self.capture[0]))


class CaptureManager:
    """pytest's capture manager as far as the stream uses it: capturing, except inside the context."""

    def __init__(self):
        self.capturing = [True]

    @contextlib.contextmanager
    def global_and_fixture_disabled(self):
        self.capturing[0] = False
        try:
            yield
        finally:
            self.capturing[0] = True


def test_inside_pytest_the_lines_are_written_while_capture_is_suspended() -> None:
    capman = CaptureManager()
    reporter = Reporter(capman.capturing)
    Live(ReporterStream(reporter, capman), tty=False).phase("quality: metrics")
    assert reporter.lines and all(not capturing for _, capturing in reporter.lines)
    assert capman.capturing == [True]  # capture is back on for the test
    assert reporter.newlines == len(reporter.lines)  # never glued to a test file's dots


def test_with_one_degree_of_freedom_no_interval_is_printed() -> None:
    stream = io.StringIO()
    bar = TimingProgress(stream, False, rounds_per_segment=8, max_segments=4)
    one_df = Look(segments=2, rounds=16, decision="continue", estimate_pct=59.8, lower_pct=-45041.6,
                  upper_pct=100.0, z=-1.2, boundary=None, standard_error=0.5, offset_sd=0.3, df=1.0)
    bar.on_look(one_df)
    line = stream.getvalue()
    assert "+59.8% (no interval yet: 1.0 degrees of freedom)" in line and "45041" not in line
    assert look(final=False).interval_text(1) == "+12.5% [+4.0%, +21.0%]"  # df unknown (inf): printed
