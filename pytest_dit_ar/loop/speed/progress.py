"""Progress of the timed rounds: on a terminal a bar (tqdm) with the rounds done, the running estimate and its
interval and the time left at most; in a pipe one line per segment with the running estimate."""

from __future__ import annotations

import time
from typing import Any

from tqdm import tqdm

from perf_suite.sequential import Look

from ..workers.live import PREFIX


class TimingProgress:
    """Callbacks for loop.speed.measurement.measure: one bar over the largest number of rounds the test may need
    (`tty`), else one line per look on `stream` (None: silent)."""

    def __init__(self, stream: Any, tty: bool, rounds_per_segment: int, max_segments: int, desc: str = "timing"):
        self.total = rounds_per_segment * max_segments
        self.stream, self.tty, self.desc = stream, tty, desc
        self._bar: tqdm | None = None  # drawn at the first round, not while the quality run is still going
        self.started = time.perf_counter()
        self.done = 0
        self.announced = False

    @property
    def bar(self) -> tqdm:
        if self._bar is None:
            self._bar = tqdm(total=self.total, file=self.stream, disable=not self.tty or self.stream is None,
                             unit="round", leave=False, desc=self.desc, dynamic_ncols=True)
        return self._bar

    def _line(self, text: str) -> None:
        if self.stream is not None and not self.tty:
            self.stream.write(f"{PREFIX}{self.desc}: {text}\n")
            self.stream.flush()

    def on_round(self, segment: int, done_in_segment: int, rounds: int) -> None:
        if not self.announced:
            self.announced = True
            self._line(f"up to {self.total} paired rounds in fresh worker pairs of {rounds} rounds each")
        self.done = segment * rounds + done_in_segment
        self.bar.n = self.done
        per_round = (time.perf_counter() - self.started) / max(1, self.done)
        self.bar.set_postfix_str(f"segment {segment + 1}, at most {per_round * (self.total - self.done):.0f} s left",
                                 refresh=True)

    def on_look(self, look: Look) -> None:
        estimate = look.figure_text(1)
        self.bar.set_description_str(f"{self.desc} {estimate}", refresh=True)
        self._line(f"segment {look.segments} done ({look.rounds} rounds, {time.perf_counter() - self.started:.0f} s): "
                   f"paired estimate {estimate}" + ("" if not look.final else f"; {look.decision}"))
        if look.final:
            self.bar.close()
