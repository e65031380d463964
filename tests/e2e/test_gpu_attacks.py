"""Queued GPU work cannot outlive a side's reply (issues 25 and 20, the statistical review's stream finding),
on a real GPU: a sandboxed worker of the embedded model on CUDA whose generate, after its outputs, queues
long matrix products on a stream of its own and returns at once, with and without replacing the
synchronize functions of torch. The harness's round trip must include the queued work (the worker's
device-wide sync, bound before the candidate was imported), so nothing of it is left to run while the
other side is timed. CUDA only: run on the device machine (`pytest tests/e2e/test_gpu_attacks.py`)."""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

import pytest
import torch

from dit_ar_contract.device import DeviceIdentity, LaneTarget
from pytest_dit_ar.loop.speed.patching import wrap_generate
from pytest_dit_ar.worker import sandbox
from pytest_dit_ar.worker.client import SandboxPolicy, WorkerProcess
from tests.helpers.sandbox_required import require_sandbox

ROOT = Path(__file__).resolve().parents[2]
HONEST, QUEUE, QUEUE_PATCHED = 1, 910001, 910002
PRODUCTS, SIZE = 40, 8192

SETUP = f"""import torch as _torch
_side = _torch.cuda.Stream()
_m = _torch.randn({SIZE}, {SIZE}, device="cuda")
"""
BODY = f"""
out = _gen(requests)
mode = int(requests[0][1])
if mode == {QUEUE_PATCHED}:
    _torch.cuda.synchronize = lambda *a, **k: None
    _torch._C._cuda_synchronize = lambda *a, **k: None
    _torch.cuda.is_initialized = lambda: False
if mode in ({QUEUE}, {QUEUE_PATCHED}):
    _side.wait_stream(_torch.cuda.current_stream())
    with _torch.cuda.stream(_side):
        x = _m
        for _ in range({PRODUCTS}):
            x = _m @ x  # queued: nothing waits for it before the reply
return out"""


def queued_work_s() -> float:
    """What the queued products take on this GPU, timed here with CUDA events (the harness's evidence is
    its own round trip; this is the test's yardstick)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    m = torch.randn(SIZE, SIZE, device="cuda")
    x = m @ m
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(PRODUCTS):
        x = m @ x
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000


@pytest.fixture(scope="module")
def gpu_worker(tmp_path_factory: pytest.TempPathFactory):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (run on the device machine)")
    require_sandbox()
    tmp = tmp_path_factory.mktemp("gpu-hostile")
    tree = tmp / "side"
    shutil.copytree(ROOT / "model_under_test", tree / "model_under_test", ignore=shutil.ignore_patterns("__pycache__"))
    init = tree / "model_under_test" / "__init__.py"
    init.write_text(init.read_text() + "\n" + wrap_generate("attack", BODY, SETUP))
    target = LaneTarget(lane="embedded-cuda", lane_id="embedded-cuda", device="cuda",
                        identity=DeviceIdentity("cuda", name=torch.cuda.get_device_name(0)), on_target=False)
    policy = SandboxPolicy(hide=(ROOT / ".git",), gpu=True, expose=(ROOT,))
    worker = WorkerProcess("candidate", tree, target, 1, tmp / "worker.log", 300.0, policy)
    worker.start()
    spec = {"root": str(sandbox.MOUNT), "lane": "embedded-cuda", "preset": "embedded-digits",
            "weights": str(ROOT / "assets" / "embedded-digits"), "device": "cuda", "resolution": 32, "steps": 2,
            "guidance": 3.0, "batch": 2, "options": {}, "gpus": 1}
    try:
        worker.request("build", spec=spec)
        for _ in range(3):
            worker.generate([["7", HONEST], ["3", 2]], resolution=32)  # warm-up (and the side's own matrix)
        yield worker
    finally:
        worker.kill()


def round_trip_s(worker: WorkerProcess, mode: int, n: int = 3) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        worker.generate([["7", mode], ["3", 2]], resolution=32)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", [QUEUE, QUEUE_PATCHED], ids=["side-stream", "side-stream-sync-patched"])
def test_work_queued_on_a_side_stream_is_charged_to_the_side_that_queued_it(gpu_worker: WorkerProcess,
                                                                          mode: int) -> None:
    work = queued_work_s()
    honest = round_trip_s(gpu_worker, HONEST)
    hostile = round_trip_s(gpu_worker, mode)
    report = {"queued_work_s": round(work, 3), "honest_s": round(honest, 4), "hostile_s": round(hostile, 4)}
    print("GPU queued-stream attack:", report)
    assert work > 0.1, report  # the yardstick must be long enough to see
    assert hostile - honest >= 0.7 * work, report  # the reply waited for the queued products
    assert honest < 0.5 * work, report  # and the honest round trip does not contain them
