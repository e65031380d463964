"""Device memory of live workers as the driver sees it (NVML per-process used memory), sampled by the harness.

A worker's own figure (torch's allocator statistics) is candidate code and not trusted; NVML counts everything
a worker's processes hold on the device (the CUDA context, the allocator's reserve, a helper process's share).
`MemorySampler` polls while workers run, keeping each side's peak and the peak of their SUM (what a card must
hold when several workers live at once: loop/workers/memory_plan.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

Reader = Callable[[], dict[str, float]]  # side -> MB used now


def used_mb(pids_by_side: dict[str, set[int]], nvml: Any) -> dict[str, float]:
    """MB used on all visible devices by each side's processes (NVML's per-process figures)."""
    nvml.nvmlInit()
    used = dict.fromkeys(pids_by_side, 0.0)
    for i in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            for side, pids in pids_by_side.items():
                if proc.pid in pids and proc.usedGpuMemory:
                    used[side] += proc.usedGpuMemory / 2**20
    return used


def nvml_reader(workers: dict[str, Any]) -> Reader:
    """A reader over the live workers' processes (their whole sandboxes), re-listed at every sample."""
    import pynvml

    def read() -> dict[str, float]:
        return used_mb({side: set(w.processes()) for side, w in workers.items()}, pynvml)

    return read


class MemorySampler:
    """Calls `read` every `interval_s` on a thread between start() and stop(); keeps per-side and summed peaks."""

    def __init__(self, read: Reader, interval_s: float = 0.05):
        self.read, self.interval_s = read, interval_s
        self.peaks: dict[str, float] = {}
        self.steady: dict[str, float] | None = None  # per-side peaks since `mark_steady` (after warm-up)
        self.peak_sum_mb = 0.0
        self.samples = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        now = self.read()
        self.samples += 1
        for side, mb in now.items():
            self.peaks[side] = max(self.peaks.get(side, 0.0), mb)
            if self.steady is not None:
                self.steady[side] = max(self.steady.get(side, 0.0), mb)
        self.peak_sum_mb = max(self.peak_sum_mb, sum(now.values()))

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as exc:  # NVML hiccup: keep what was seen, say so
                self.error = f"{type(exc).__name__}: {exc}"
                return
            self._stop.wait(self.interval_s)

    def start(self) -> MemorySampler:
        self._thread = threading.Thread(target=self._loop, name="dit-ar-nvml", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> MemorySampler:
        if self._stop.is_set():
            return self
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.sample()  # one last look: the allocator keeps its peak reserve until the process exits
        except Exception as exc:
            self.error = self.error or f"{type(exc).__name__}: {exc}"
        return self

    def mark_steady(self) -> None:
        """The workers are warm: keep each side's steady peak from now on (a first reading now)."""
        self.steady = {}
        try:
            self.sample()
        except Exception as exc:  # NVML hiccup: the sampler's thread reads again
            self.error = self.error or f"{type(exc).__name__}: {exc}"

    def peak(self, side: str) -> float | None:
        return self.peaks.get(side) or None

    def steady_peak(self, side: str) -> float | None:
        return (self.steady or {}).get(side) or None
