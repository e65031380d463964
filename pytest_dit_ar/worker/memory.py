"""A worker's memory as the harness samples it while the worker lives: host memory (its cgroup's anonymous +
shared memory: files in its tmpfs and /dev/shm, memfds; or the /proc fallback) and, on CUDA lanes, device
memory per GPU through NVML. Nothing the worker can reset is read (VmHWM, which /proc/self/clear_refs erases,
is not used)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dit_ar_contract.errors import Refused

from . import cgroup

if TYPE_CHECKING:
    from .processes import SideProcesses

MEMORY_SAMPLE_S = 0.05  # how often the harness samples a worker's memory (host: cgroup; device: NVML)


class MemoryWatch:
    """The memory samplers of one worker (`start` once it runs, `stop` when it is killed)."""

    def __init__(self, worker: SideProcesses):
        self.worker = worker
        self.host: cgroup.Sampler | None = None
        self.gpu: cgroup.Sampler | None = None

    def start(self) -> None:
        """Sample the worker's memory from the harness while it lives: its cgroup's anonymous + shared
        memory (tmpfs, /dev/shm, memfd), or the /proc fallback; device memory through NVML on CUDA lanes."""
        self.host = cgroup.Sampler(self.held_mb, MEMORY_SAMPLE_S).start()
        if self.worker.target.device.startswith("cuda"):
            self.gpu = cgroup.Sampler(self._gpu_now_mb, MEMORY_SAMPLE_S * 2).start()

    def stop(self) -> None:
        for sampler in (self.host, self.gpu):
            if sampler is not None:
                sampler.stop_thread()

    def held_mb(self) -> float | None:
        """The memory the worker's processes hold now (host), as the harness reads it."""
        w = self.worker
        group = w.group  # read once: kill() may drop it from another thread
        if group is not None and group.memory is not None:
            return group.held_mb()
        pids = w.processes()
        init = w.namespace.init_pid if w.namespace else None
        roots = [Path(f"/proc/{init}/root/tmp"), Path(f"/proc/{init}/root/dev/shm")] if init else []
        return cgroup.proc_memory_mb(pids, roots) if pids else None

    def _gpu_now_mb(self) -> float | None:
        if self.worker.proc is None:
            return None
        try:
            return self._gpu_once_mb()
        except Refused:
            return None

    def peak_host_mb(self) -> float | None:
        """Peak host memory of everything the worker runs, sampled every MEMORY_SAMPLE_S."""
        return self.host.sample() if self.host is not None else None

    def mark_steady(self) -> None:
        """The worker is warm: from now on the samplers also keep its steady peak (what the growth guardrail
        judges; the whole-life peak, a compile's transient included, stays recorded and judges the budget)."""
        for sampler in (self.host, self.gpu):
            if sampler is not None:
                sampler.mark_steady()

    def steady_host_mb(self) -> float | None:
        """Peak host memory since `mark_steady` (None before it)."""
        if self.host is None:
            return None
        self.host.sample()
        return self.host.steady

    def steady_gpu_mb(self) -> float | None:
        """Peak device memory (NVML, fullest GPU) since `mark_steady` (None before it or on CPU lanes)."""
        if self.gpu is None:
            return None
        self.gpu.sample()
        return self.gpu.steady

    def gpu_mb(self) -> float | None:
        """Device memory of the worker's processes on its fullest GPU as the driver sees it (NVML): the VRAM
        guardrail holds per GPU, so a candidate spread over two GPUs is judged by the larger share. None on
        CPU lanes; on a CUDA lane a missing NVML binding is a refusal (the guardrail would otherwise trust
        the worker's figure)."""
        if self.gpu is not None:
            self.gpu.sample()
            return self.gpu.peak
        return self._gpu_once_mb()

    def _gpu_once_mb(self) -> float | None:
        per_gpu = self.gpu_per_device_mb()
        return max(per_gpu.values()) if per_gpu else None

    def gpu_per_device_mb(self) -> dict[str, float]:
        """Device memory of the worker's processes (a helper it started included) per GPU UUID (NVML)."""
        if not self.worker.target.device.startswith("cuda"):
            return {}
        try:
            import pynvml
        except ImportError as exc:
            raise Refused("GPU memory is read through NVML and its binding is missing: "
                          "pip install nvidia-ml-py (a dependency of pytest-dit-ar)") from exc
        try:
            pynvml.nvmlInit()
            pids = set(self.worker.processes())
            per_gpu: dict[str, float] = {}
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                used = sum(p.usedGpuMemory / 2**20 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                           if p.pid in pids and p.usedGpuMemory)
                if used:
                    uuid = pynvml.nvmlDeviceGetUUID(handle)
                    per_gpu[uuid.decode() if isinstance(uuid, bytes) else str(uuid)] = used
            return per_gpu
        except pynvml.NVMLError as exc:
            raise Refused(f"NVML could not read the workers' GPU memory ({exc}); check the driver with "
                          "`nvidia-smi`") from exc
