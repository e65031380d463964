"""Progress of the timed rounds on the terminal (tqdm): rounds done, the running estimate and its interval,
and the time left at most; silent when the output is not a terminal."""

from __future__ import annotations

import time
from typing import Any

from tqdm import tqdm

from perf_suite.sequential import Look


class TimingProgress:
    """Callbacks for loop.measurement.measure: one bar over the largest number of rounds the test may need."""

    def __init__(self, stream: Any, enabled: bool, rounds_per_segment: int, max_segments: int):
        self.total = rounds_per_segment * max_segments
        self.bar = tqdm(total=self.total, file=stream, disable=not enabled, unit="round", leave=False,
                        desc="timing", dynamic_ncols=True)
        self.started = time.perf_counter()
        self.done = 0

    def on_round(self, segment: int, done_in_segment: int, rounds: int) -> None:
        self.done = segment * rounds + done_in_segment
        self.bar.n = self.done
        per_round = (time.perf_counter() - self.started) / max(1, self.done)
        self.bar.set_postfix_str(f"segment {segment + 1}, at most {per_round * (self.total - self.done):.0f} s left",
                                 refresh=True)

    def on_look(self, look: Look) -> None:
        self.bar.set_description_str(f"timing {look.estimate_pct:+.1f}% [{look.lower_pct:+.1f}%, "
                                     f"{look.upper_pct:+.1f}%]", refresh=True)
        if look.final:
            self.bar.close()
