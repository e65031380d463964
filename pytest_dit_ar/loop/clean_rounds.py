"""Clean timed rounds: balanced side orders, the GPU's state around every timed side, and throttle flags.

* Orders: within a segment the sides alternate CB, BC, CB, ... from a random first order, so each side
  goes first in half the rounds (an order effect cancels within the segment instead of by chance).
* Before a side is timed the other side is frozen and its worker has synchronised every GPU before its
  reply (worker/server.py `settle`), so its own work is done. What a sync in the worker cannot cover is a
  helper process of the frozen side with a CUDA context of its own (kernels it queued keep running after
  SIGSTOP): when NVML lists such a process (`GpuWatch.helpers`), `GpuWatch.wait_idle` waits until the GPU
  shows no utilisation (at most `IDLE_WAIT_S`), else the side is flagged as timed on a busy GPU. Without
  helpers nothing is waited for (NVML's utilisation lags by its sample period, up to a second, so waiting
  on it every round would cost more than the rounds). On CPU lanes the watch is `NoGpu`.
* Every timed side gets a `GpuSample` (SM clock, power, temperature, throttle reasons) right after its
  generate; a round in which either side's sample names a slowdown (power cap, thermal, power brake,
  hardware slowdown) is flagged. Flagged rounds are kept in the verdict and said in the summary: dropping
  or re-running them would excuse a side whose own power draw throttles the GPU (a candidate that runs hot
  would lose its slow rounds).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

# NVML clocks-event (throttle) reason bits, nvml.h (nvmlClocksEventReason*)
SLOWDOWNS = {0x4: "power cap", 0x8: "hardware slowdown", 0x20: "software thermal", 0x40: "hardware thermal",
             0x80: "power brake"}
IDLE_POLL_S = 0.005


def balanced_orders(rounds: int, cand_first: bool) -> list[str]:
    """`rounds` orders alternating from the given first one: CB, BC, CB, ... or BC, CB, BC, ..."""
    first, second = ("CB", "BC") if cand_first else ("BC", "CB")
    return [first if i % 2 == 0 else second for i in range(rounds)]


@dataclass(frozen=True)
class GpuSample:
    """One NVML reading of the lane's GPU (the fullest one of a multi-GPU lane is read first)."""

    sm_clock_mhz: int | None = None
    power_w: float | None = None
    temperature_c: int | None = None
    throttle_reasons: int = 0
    utilization_pct: int | None = None

    @property
    def slowdowns(self) -> list[str]:
        return [name for bit, name in SLOWDOWNS.items() if self.throttle_reasons & bit]


class GpuWatch(Protocol):
    def sample(self) -> list[GpuSample]: ...

    def helpers(self, pids: set[int]) -> list[int]: ...

    def wait_idle(self, max_wait_s: float) -> tuple[float, bool]: ...


class NoGpu:
    """The watch of a CPU lane: nothing to read, nothing to wait for."""

    def sample(self) -> list[GpuSample]:
        return []

    def helpers(self, pids: set[int]) -> list[int]:
        return []

    def wait_idle(self, max_wait_s: float) -> tuple[float, bool]:
        return 0.0, True


class NvmlWatch:
    """NVML readings of the GPUs a pair's workers use (by UUID, the driver's names)."""

    def __init__(self, uuids: list[str]):
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByUUID(u.encode() if isinstance(u, str) else u) for u in uuids]

    def _read(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self.nvml, fn)(*args)
        except (self.nvml.NVMLError, AttributeError):
            return None

    def sample(self) -> list[GpuSample]:
        n = self.nvml
        out = []
        for h in self.handles:
            power = self._read("nvmlDeviceGetPowerUsage", h)
            reasons = self._read("nvmlDeviceGetCurrentClocksEventReasons", h)
            if reasons is None:
                reasons = self._read("nvmlDeviceGetCurrentClocksThrottleReasons", h)
            util = self._read("nvmlDeviceGetUtilizationRates", h)
            out.append(GpuSample(self._read("nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_SM),
                                 power / 1000.0 if power is not None else None,
                                 self._read("nvmlDeviceGetTemperature", h, n.NVML_TEMPERATURE_GPU),
                                 int(reasons or 0), util.gpu if util is not None else None))
        return out

    def helpers(self, pids: set[int]) -> list[int]:
        """Which of `pids` hold a CUDA context on the pair's GPUs (NVML's compute processes)."""
        found = []
        for h in self.handles:
            for proc in self._read("nvmlDeviceGetComputeRunningProcesses", h) or []:
                if proc.pid in pids:
                    found.append(int(proc.pid))
        return sorted(set(found))

    def busy(self) -> bool:
        for h in self.handles:
            util = self._read("nvmlDeviceGetUtilizationRates", h)
            if util is not None and util.gpu > 0:
                return True
        return False

    def wait_idle(self, max_wait_s: float) -> tuple[float, bool]:
        """Wait until no GPU of the pair reports utilisation (at most `max_wait_s`): seconds waited, idle."""
        return wait_until_idle(self.busy, max_wait_s)


def wait_until_idle(busy: Any, max_wait_s: float, clock: Any = time.perf_counter, sleep: Any = time.sleep
                    ) -> tuple[float, bool]:
    start = clock()
    while busy():
        if clock() - start >= max_wait_s:
            return clock() - start, False
        sleep(IDLE_POLL_S)
    return clock() - start, True


@dataclass
class SideTiming:
    """One side's part of a round: wall-clock start and end (epoch seconds), the idle wait before it and
    the GPU readings right after it."""

    start: float
    end: float
    idle_wait_s: float = 0.0
    idle: bool = True
    gpu: list[GpuSample] = field(default_factory=list)

    @property
    def slowdowns(self) -> list[str]:
        return sorted({s for g in self.gpu for s in g.slowdowns})


@dataclass
class RoundRecord:
    """One timed round: its order and each side's timing and GPU state."""

    index: int
    order: str
    sides: dict[str, SideTiming]

    @property
    def throttled(self) -> dict[str, list[str]]:
        """The sides whose GPU reading named a slowdown, and which."""
        return {side: t.slowdowns for side, t in self.sides.items() if t.slowdowns}

    @property
    def busy_before(self) -> list[str]:
        """The sides timed although the GPU still showed work in flight after the wait."""
        return [side for side, t in self.sides.items() if not t.idle]

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "order": self.order, "throttled": self.throttled,
                "sides": {side: asdict(t) for side, t in self.sides.items()}}


def flagged(records: list[RoundRecord]) -> list[int]:
    """Indices of the rounds in which a side was throttled or timed with the GPU still busy."""
    return [r.index for r in records if r.throttled or r.busy_before]


def summary(records: list[RoundRecord]) -> str | None:
    """One line for the verdict's summary when any round was flagged, else None."""
    bad = [r for r in records if r.throttled or r.busy_before]
    if not bad:
        return None
    sides = {"cand": 0, "best": 0}
    kinds: set[str] = set()
    for r in bad:
        for side, names in r.throttled.items():
            sides[side] += 1
            kinds.update(names)
        for side in r.busy_before:
            sides[side] += 1
            kinds.add("GPU busy before timing")
    return (f"{len(bad)} of {len(records)} timed rounds flagged ({', '.join(sorted(kinds))}; candidate "
            f"{sides['cand']}, best {sides['best']}): kept in the verdict, see perf.json rounds")
