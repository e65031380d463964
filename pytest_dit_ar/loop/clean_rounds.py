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
  hardware slowdown) is flagged (the round records are state/perf_record.py's). Flagged rounds are kept in the
  verdict and said in the summary: dropping or re-running them would excuse a side whose own power draw
  throttles the GPU (a candidate that runs hot would lose its slow rounds).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from ..state.perf_record import GpuSample

IDLE_POLL_S = 0.005


def balanced_orders(rounds: int, cand_first: bool) -> list[str]:
    """`rounds` orders alternating from the given first one: CB, BC, CB, ... or BC, CB, BC, ..."""
    first, second = ("CB", "BC") if cand_first else ("BC", "CB")
    return [first if i % 2 == 0 else second for i in range(rounds)]


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
