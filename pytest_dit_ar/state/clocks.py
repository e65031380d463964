"""What a timed side's GPU clock did while it ran: NVML samples of the SM clock and the clocks-event (throttle)
reasons, taken by the harness every `CLOCK_SAMPLE_S` during the side's generate (loop/speed/clean_rounds.py), summed up
as a `ClockSpan` per GPU.

A sample counts as fallen when the SM clock is below `FELL_FRACTION` of the GPU's maximum SM clock while the GPU
was not idle (NVML's "GPU idle" reason: between kernels the clock drops by design, which slows nothing). A side's
clock *fell* when its fallen samples cover at least `FELL_SHARE` of the side's sampled time. A reason such as
"power cap" with the clock at its maximum is a flag, not a fall: the GPU drew its power limit and still ran at
full clock."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CLOCK_SAMPLE_S = 0.02  # NVML clock and reasons read this often while a side is timed
FELL_FRACTION = 0.95  # a sample below 95% of the maximum SM clock (e.g. 1881 of 1980 MHz) has fallen
FELL_SHARE = 0.10  # a side's clock fell when fallen samples cover at least a tenth of its sampled time
IDLE_BIT = 0x1  # nvmlClocksEventReasonGpuIdle
# NVML clocks-event (throttle) reason bits, nvml.h (nvmlClocksEventReason*)
SLOWDOWNS = {0x4: "power cap", 0x8: "hardware slowdown", 0x20: "software thermal", 0x40: "hardware thermal",
             0x80: "power brake"}


def reason_names(bits: int) -> list[str]:
    return [name for bit, name in SLOWDOWNS.items() if bits & bit]


@dataclass(frozen=True)
class ClockSpan:
    """One GPU's SM clock over a timed side: its maximum, the lowest working sample, seconds below
    FELL_FRACTION of the maximum (working), the seconds sampled, the samples and the reasons seen (OR of bits)."""

    max_mhz: int
    min_mhz: int
    below_s: float
    span_s: float
    samples: int
    reasons: int = 0

    @property
    def fell(self) -> bool:
        return self.span_s > 0 and self.below_s >= FELL_SHARE * self.span_s

    def describe(self) -> str:
        """E.g. 'SM clock 1410 of 1980 MHz for 0.80 s of 1.20 s; power cap'."""
        names = reason_names(self.reasons)
        text = f"SM clock {self.min_mhz} of {self.max_mhz} MHz for {self.below_s:.2f} s of {self.span_s:.2f} s"
        return text + (f"; {', '.join(names)}" if names else "")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClockSpan | None:
        try:
            return cls(int(data["max_mhz"]), int(data["min_mhz"]), float(data["below_s"]), float(data["span_s"]),
                       int(data["samples"]), int(data.get("reasons", 0)))
        except (KeyError, TypeError, ValueError):
            return None


def summarize(times: list[float], clocks: list[int | None], reasons: list[int], max_mhz: int) -> ClockSpan | None:
    """A ClockSpan of samples taken at `times` (seconds): each sample stands for the time to the next one (the
    last for the mean interval). None without samples or a maximum clock."""
    rows = [(t, c, r) for t, c, r in zip(times, clocks, reasons) if c is not None]
    if not rows or max_mhz <= 0:
        return None
    steps = [b[0] - a[0] for a, b in zip(rows, rows[1:])]
    steps.append(sum(steps) / len(steps) if steps else 0.0)
    working = [(c, dt) for (_, c, r), dt in zip(rows, steps) if not r & IDLE_BIT]
    below = sum(dt for c, dt in working if c < FELL_FRACTION * max_mhz)
    low = min((c for c, _ in working), default=max(c for _, c, _ in rows))
    seen = 0
    for _, _, r in rows:
        seen |= r
    return ClockSpan(max_mhz, int(low), below, sum(steps), len(rows), seen)
