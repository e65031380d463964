"""How a run of the plugin ends on the terminal: a refusal's line and its way out, or the verdict's last line (after
the few lines of a verdict reached before any candidate code ran), and what becomes of `dit-ar experiment`'s held
output (plugin/terminal.py's HeldOutput): written out once the run starts, dropped on a refusal or a pre-run
verdict, whose own lines then stand alone."""

from __future__ import annotations

import sys

import pytest

from dit_ar_contract.errors import Refused

from .terminal import HeldOutput, last_line, one_line


class Ending:
    """The refusal (with its way out) or the verdict line a run ends with, and the held output."""

    def __init__(self, held: HeldOutput | None):
        self.held = held
        self.refusal: str | None = None
        self.way_out = ""  # the refusal's own way out (else the session's, `state/way_out.py`)
        self.prerun: list[str] = []  # a verdict before any candidate code ran, in a few lines (held output only)
        self.last_line: str | None = None

    def refuse(self, exc: Refused, replace: bool = False) -> None:
        """Note a refusal (the first one, unless `replace`) with its way out."""
        if replace or not self.refusal:
            self.refusal, self.way_out = str(exc), exc.way_out

    def refused(self) -> Refused | None:
        """The refusal noted so far, as raised."""
        return Refused(self.refusal, self.way_out) if self.refusal else None

    def verdict_before_the_run(self, line: str, lines: list[str], session: pytest.Session) -> None:
        """A verdict reached before any candidate code ran (a scope discard): its lines stand for pytest's."""
        self.refusal, self.last_line = None, line
        self.drop(session)
        self.prerun = lines if self.held is not None else []

    def drop(self, session: pytest.Session) -> None:
        """pytest's framing dropped (`dit-ar experiment`), unless collection failed: its errors are the reason."""
        if self.held is not None and session.testsfailed:
            self.held.release()
        elif self.held is not None:
            self.held.drop()

    def started(self) -> None:
        """The run starts: pytest's output from here on, its banner first."""
        if self.held is not None:
            self.held.release()

    def write(self, way_out: str = "") -> None:
        """The last lines, after everything pytest wrote; `way_out`: the session's, for a refusal without one."""
        if self.held is not None and self.held.mode == "hold":  # the run never reached its start: nothing is lost
            self.held.release()
        if self.held is not None and sys.stdout is self.held:  # still in place (no output capture replaced it)
            sys.stdout = self.held.stream
        out = self.held.stream if self.held is not None else None
        if self.refusal:
            last_line("REFUSED: " + one_line(self.refusal), out)
            if self.way_out or way_out:
                last_line("way out: " + (self.way_out or way_out), out)
        elif self.last_line:
            for line in self.prerun:
                last_line(line, out)
            last_line(self.last_line, out)
