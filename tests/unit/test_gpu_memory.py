"""GPU memory for the guardrail is read by the harness through NVML; without the binding a CUDA lane refuses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dit_ar_contract.device import DeviceIdentity, LaneTarget
from dit_ar_contract.errors import Refused
from pytest_dit_ar.worker.client import WorkerProcess


def worker(device: str, tmp_path: Path) -> WorkerProcess:
    target = LaneTarget(lane="x", lane_id="x", device=device, identity=DeviceIdentity(kind=device[:4]),
                        on_target=False)
    return WorkerProcess("cand", tmp_path, target, 1, tmp_path / "cand.log")


def test_a_cuda_lane_without_the_nvml_binding_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml now raises ImportError
    with pytest.raises(Refused, match="pip install nvidia-ml-py"):
        worker("cuda:0", tmp_path).gpu_memory_mb()


def test_a_cpu_lane_reads_no_gpu_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert worker("cpu", tmp_path).gpu_memory_mb() is None


def test_the_nvml_binding_is_a_declared_dependency() -> None:
    import tomllib

    deps = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert any(d.startswith("nvidia-ml-py") for d in deps["dependencies"])


def fake_nvml(per_device: list[list[tuple[int, int]]]) -> object:
    """A stand-in NVML: device i runs processes (pid, bytes used)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        NVMLError=RuntimeError, nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: len(per_device),
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetUUID=lambda i: f"GPU-{i}",
        nvmlDeviceGetComputeRunningProcesses=lambda i: [SimpleNamespace(pid=p, usedGpuMemory=b)
                                                        for p, b in per_device[i]])


def test_the_vram_guardrail_reads_each_gpu_on_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gib = 2**30
    # the worker (pid 11) and the helper it started for rank 1 (pid 12); pid 99 is someone else's
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([[(11, 10 * gib), (99, 50 * gib)], [(12, 12 * gib)]]))
    monkeypatch.setattr(WorkerProcess, "processes", lambda self: [11, 12])
    w = worker("cuda:0", tmp_path)
    assert w.gpu_memory_per_device_mb() == {"GPU-0": 10 * 1024, "GPU-1": 12 * 1024}
    assert w.gpu_memory_mb() == 12 * 1024  # the fuller GPU, not the sum: the budget is per GPU


def test_the_sampler_keeps_each_sides_peak_and_the_peak_of_their_sum() -> None:
    from pytest_dit_ar.worker.gpu_memory import MemorySampler, used_mb

    gib = 2**30
    timeline = iter([
        [[(11, 4 * gib), (21, 2 * gib), (99, 60 * gib)]],   # 99 is someone else's: never counted
        [[(11, 9 * gib), (21, 2 * gib)]],                   # the candidate peaks while the best is small
        [[(11, 5 * gib), (21, 8 * gib)]],                   # the best peaks later: the sum is 13 GiB here
    ])
    pids = {"cand": {11}, "best": {21}}

    def read() -> dict[str, float]:
        return used_mb(pids, fake_nvml(next(timeline)))

    s = MemorySampler(read)
    for _ in range(3):
        s.sample()
    assert s.peak("cand") == 9 * 1024 and s.peak("best") == 8 * 1024
    assert s.peak_sum_mb == 13 * 1024  # not 9 + 8: they never peaked together
    assert s.samples == 3


def test_the_sampler_thread_stops_and_takes_a_last_sample() -> None:
    from pytest_dit_ar.worker.gpu_memory import MemorySampler

    values = iter(range(1, 10_000))
    s = MemorySampler(lambda: {"cand": float(next(values))}, interval_s=0.001).start()
    s.stop()
    assert s.samples >= 1 and s.peak("cand") == float(s.samples) and s.error is None
