"""The plugin's live terminal output: the evidence's phases and timed rounds while the tests run, written past
pytest's output capture, and the one last line a run prints."""

from __future__ import annotations

import io
import sys
from typing import Any, TextIO

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


def last_line(text: str, stream: TextIO | None = None) -> None:
    """One of the run's last lines, after everything pytest wrote (`stream`: where, default stdout)."""
    sys.stdout.flush()
    sys.stderr.flush()
    print(text, file=stream or sys.stdout, flush=True)


class HeldOutput(io.TextIOBase):
    """pytest's terminal output while `dit-ar experiment` does not yet know whether its run starts (the CLI passes
    `--dit-ar-held-output`; the terminal reporter is made with this as its file): what pytest writes (its banner,
    the collection) is held. `release` writes it out and lets the rest through (the run started); `drop` discards
    it and all pytest writes after it (a refusal, or a verdict before any candidate code ran: the plugin prints
    those in its own few lines to `stream`). `pytest --dit-ar-experiment` has none: pytest's framing stays."""

    def __init__(self, stream: TextIO):
        super().__init__()
        self.stream = stream
        self.held: list[str] = []
        self.mode = "hold"  # "hold", "pass" or "drop"

    def write(self, text: str) -> int:
        if self.mode == "pass":
            return self.stream.write(text)
        if self.mode == "hold":
            self.held.append(text)
        return len(text)

    def flush(self) -> None:
        if self.mode == "pass":
            self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override] - the stream's
        return getattr(self.stream, "encoding", "utf-8")

    def release(self) -> None:
        if self.mode == "hold":
            self.stream.write("".join(self.held))
            self.stream.flush()
        self.held, self.mode = [], "pass"

    def drop(self) -> None:
        self.held, self.mode = [], "drop"


def held_output() -> HeldOutput | None:
    """The HeldOutput in place of stdout while the plugins are configured (`--dit-ar-held-output`), if any."""
    return sys.stdout if isinstance(sys.stdout, HeldOutput) else None


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
