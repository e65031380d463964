"""When a worker is warm: the stated rule that ends the warm-up (a pure function; loop.speed.measurement applies it).

A compiled or CUDA-graphed model reaches its steady speed only after several calls (compilation, graph capture,
autotuning, the allocator settling), so a fixed count of warm-up rounds either wastes time or times a worker
that is still getting faster. The rule, per side, after each warm-up round:

* never before `min_rounds` rounds (the lane's `warmup_rounds`) nor before `window` rounds;
* steady when the last `window` round times lie within `tolerance_pct` of each other (max <= min * (1 + x)),
* or when the worker stopped getting faster: the fastest of the last `window` rounds is at most
  `tolerance_pct` faster than the fastest round before them (a noisy but warm eager worker meets this one);
* and at `max_rounds` rounds it stops anyway (`capped`: the summary says so).

A worker that already generated (the candidate's quality run: the corpus in full batches, timed by the harness)
brings those times as history (`state_after`): the rule reads them with at least one new round, so a worker the
corpus already warmed is steady after that one round instead of `window` more.

Defaults (PerfProtocol): window 3, 10%, at most 8 rounds; the embedded CPU lane uses window 2 and at most 3
rounds, so its eager workers (which have nothing to compile) cost at most one round more than the fixed 2.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WarmupRule:
    """The rule's parameters (from the lane's performance section)."""

    min_rounds: int = 2
    window: int = 3
    tolerance_pct: float = 10.0
    max_rounds: int = 8

    def state(self, times: list[float]) -> str:
        """'warming' (another round), 'steady' or 'capped' for the round times seen so far (seconds)."""
        n = len(times)
        if n >= max(self.min_rounds, self.window) and self.window > 0 and steady(times, self.window,
                                                                                  self.tolerance_pct):
            return "steady"
        if n >= self.max_rounds:
            return "capped"
        return "warming"

    def state_after(self, history: list[float], times: list[float]) -> str:
        """The state of a worker that already ran `history` (the same requests' shape, the harness's clock)
        before these warm-up rounds: at least one new round; steady judged on all of them; the cap counts the
        new rounds only."""
        if not history:
            return self.state(times)
        if not times:
            return "warming"
        every = history + times
        if len(every) >= max(self.min_rounds, self.window) and steady(every, self.window, self.tolerance_pct):
            return "steady"
        return "capped" if len(times) >= self.max_rounds else "warming"

    def done(self, times: list[float]) -> bool:
        return self.state(times) != "warming"


def steady(times: list[float], window: int, tolerance_pct: float) -> bool:
    """The last `window` times within `tolerance_pct` of each other, or no faster than the best before them."""
    if window <= 0 or len(times) < window:
        return False
    last = times[-window:]
    tol = tolerance_pct / 100.0
    if max(last) <= min(last) * (1 + tol):
        return True
    earlier = times[:-window]
    return bool(earlier) and min(last) >= min(earlier) * (1 - tol)
