"""The plugin's live terminal output: the evidence's phases and timed rounds while the tests run, written past
pytest's output capture, and the one last line a run prints."""

from __future__ import annotations

import sys
from typing import Any

import pytest


def show_progress(config: pytest.Config, evidence: Any, protocol: Any) -> None:
    """The evidence's phases and timed rounds on the terminal while the tests run (a bar on a terminal, one
    line per phase in a pipe), written past pytest's output capture."""
    from ..loop.speed.progress import TimingProgress
    from ..loop.workers.live import Live

    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    stream = ReporterStream(reporter, config.pluginmanager.get_plugin("capturemanager"))
    tty = bool(reporter.isatty)
    evidence.live = Live(stream, tty)
    evidence.progress = TimingProgress(stream, tty, protocol.rounds, protocol.max_segments)


def one_line(text: str) -> str:
    """A multi-line reason (a list of files, say) folded into the one last line a refusal prints."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines[:1] + ["; ".join(lines[1:])] if len(lines) > 1 else lines)


def last_line(text: str) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    print(text, flush=True)


class ReporterStream:
    """A file-like view of pytest's terminal reporter that writes past the output capture (as pytest's live
    logging does): a test's own capture would otherwise hold the progress until the test ends."""

    def __init__(self, reporter: Any, capman: Any = None):
        self.reporter = reporter
        self.capman = capman

    def write(self, text: str) -> None:
        if self.capman is None:
            self._write(text)
            return
        with self.capman.global_and_fixture_disabled():
            self._write(text)

    def _write(self, text: str) -> None:
        self.reporter.ensure_newline()  # not after a test file's dots: pytest starts its line again afterwards
        self.reporter.write(text, flush=True)

    def flush(self) -> None:
        """The reporter flushes each write."""
