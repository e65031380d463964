"""Live progress of a baseline or an experiment, where the user sees it while the run is going.

On a terminal each long phase gets a bar (tqdm, cleared when done); in a pipe or a log file each phase gets one
line when it starts (`dit-ar: candidate corpus: 48 cases`), and the timing one line per segment with the running
estimate. Inside pytest the stream is the terminal reporter behind a suspended capture (see
plugin/terminal.py), so nothing waits in the capture buffer until the test ends."""

from __future__ import annotations

import time
from typing import Any

from tqdm import tqdm

PREFIX = "dit-ar: "


class _NoBar:
    """What a phase's bar is in a pipe: its one line was written when the phase started."""

    def update(self, n: int = 1) -> None:
        """Nothing between the phase lines."""

    def close(self) -> None:
        """Nothing to clear."""


class Live:
    """Phase lines and bars on one stream; `tty` chooses bars (a terminal) or one line per phase (a pipe)."""

    def __init__(self, stream: Any, tty: bool):
        self.stream, self.tty = stream, tty
        self.started = time.perf_counter()

    def phase(self, text: str) -> None:
        """One line: what the run does now, with the seconds since it started."""
        self.stream.write(f"{PREFIX}[{time.perf_counter() - self.started:5.0f}s] {text}\n")
        self.stream.flush()

    def bar(self, desc: str, total: int, unit: str) -> Any:
        """A bar over `total` units on a terminal; elsewhere the phase's line and a bar that writes nothing."""
        if self.tty:
            return tqdm(total=total, desc=desc, unit=unit, file=self.stream, leave=False, dynamic_ncols=True)
        self.phase(f"{desc}: {total} {unit}{'s' if total != 1 else ''}")
        return _NoBar()
