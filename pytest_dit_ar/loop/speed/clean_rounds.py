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
  generate, and its SM clock and throttle reasons sampled every CLOCK_SAMPLE_S while it ran (`ClockTrace`,
  summed up per GPU by state/clocks.py: the lowest working clock against the maximum, and for how long it was
  below FELL_FRACTION of it). A round in which either side names a slowdown (power cap, thermal, power brake,
  hardware slowdown) or whose clock fell is flagged (the round records are state/perf_record.py's); a reason
  with the clock at its maximum is a flag only. A round is excluded only when the BEST's clock fell (the round
  would favour the candidate): another round is played in its place, at most a quarter of a segment's rounds
  (loop/speed/segment.py). A fall on the candidate's side alone keeps the round: excusing it would excuse a side
  whose own power draw throttles the GPU (a candidate that runs hot would lose its slow rounds).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from ...state.clocks import CLOCK_SAMPLE_S, ClockSpan, summarize
from ...state.perf_record import GpuSample

IDLE_POLL_S = 0.005


def balanced_orders(rounds: int, cand_first: bool) -> list[str]:
    """`rounds` orders alternating from the given first one: CB, BC, CB, ... or BC, CB, BC, ..."""
    first, second = ("CB", "BC") if cand_first else ("BC", "CB")
    return [first if i % 2 == 0 else second for i in range(rounds)]


class GpuWatch(Protocol):
    def sample(self) -> list[GpuSample]: ...

    def helpers(self, pids: set[int]) -> list[int]: ...

    def wait_idle(self, max_wait_s: float) -> tuple[float, bool]: ...


class ClockTrace:
    """Samples `read` (per GPU: SM clock, reasons) every CLOCK_SAMPLE_S on a harness thread from creation to
    `stop`, which returns one ClockSpan per GPU (`max_mhz`: each GPU's maximum SM clock)."""

    def __init__(self, read: Any, max_mhz: list[int], clock: Any = time.perf_counter):
        self.read, self.max_mhz, self.clock = read, max_mhz, clock
        self.times: list[float] = []
        self.rows: list[list[tuple[int | None, int]]] = []
        self._stop = threading.Event()
        self._take()
        self._thread = threading.Thread(target=self._run, name="dit-ar-clocks", daemon=True)
        self._thread.start()

    def _take(self) -> None:
        try:
            row = self.read()
        except Exception:  # noqa: BLE001 - an NVML hiccup loses one sample, never the round
            return
        self.times.append(self.clock())
        self.rows.append(row)

    def _run(self) -> None:
        while not self._stop.wait(CLOCK_SAMPLE_S):
            self._take()

    def stop(self) -> list[ClockSpan]:
        self._stop.set()
        self._thread.join(timeout=1)
        self._take()
        spans = []
        for g, top in enumerate(self.max_mhz):
            per = [row[g] if g < len(row) else (None, 0) for row in self.rows]
            span = summarize(self.times, [c for c, _ in per], [r for _, r in per], top)
            if span is not None:
                spans.append(span)
        return spans


class NoTrace:
    def stop(self) -> list[ClockSpan]:
        return []


def trace(watch: Any) -> Any:
    """The watch's clock trace of one timed side (nothing on a CPU lane or a watch without one)."""
    start = getattr(watch, "trace", None)
    return start() if start is not None else NoTrace()


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
        self.max_mhz: list[int] | None = None  # each GPU's maximum SM clock, read on the first trace

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

    def clocks(self) -> list[tuple[int | None, int]]:
        """Each GPU's SM clock (MHz) and clocks-event reasons now."""
        out = []
        for h in self.handles:
            reasons = self._read("nvmlDeviceGetCurrentClocksEventReasons", h)
            if reasons is None:
                reasons = self._read("nvmlDeviceGetCurrentClocksThrottleReasons", h)
            out.append((self._read("nvmlDeviceGetClockInfo", h, self.nvml.NVML_CLOCK_SM), int(reasons or 0)))
        return out

    def trace(self) -> ClockTrace:
        """Sample the SM clocks while a side is timed (ClockTrace)."""
        if self.max_mhz is None:
            self.max_mhz = [int(self._read("nvmlDeviceGetMaxClockInfo", h, self.nvml.NVML_CLOCK_SM) or 0)
                            for h in self.handles]
        return ClockTrace(self.clocks, self.max_mhz)

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
