"""How long closing one sandboxed worker of the embedded model takes (wave 7: a closed worker's zombie was
waited for). Run from the repository root on the CPU VM:

    python lab/probes/worker_close_cost.py [N]

Starts N (default 2) sandboxed embedded-cpu workers one after another, builds, generates once, then times
`WorkerProcess.close()` (exit request, kill, wait until nothing of the sandbox runs)."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dit_ar_contract.device import DeviceIdentity, LaneTarget  # noqa: E402
from pytest_dit_ar.worker import sandbox  # noqa: E402
from pytest_dit_ar.worker.client import SandboxPolicy, WorkerProcess  # noqa: E402


def main(n: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="close-cost-"))
    tree = tmp / "side"
    shutil.copytree(ROOT / "model_under_test", tree / "model_under_test", ignore=shutil.ignore_patterns("__pycache__"))
    target = LaneTarget(lane="embedded-cpu", lane_id="embedded-cpu", device="cpu", identity=DeviceIdentity("cpu"),
                        on_target=True)
    policy = SandboxPolicy(hide=(ROOT / ".git",), expose=(ROOT,))
    spec = {"root": str(sandbox.MOUNT), "lane": "embedded-cpu", "preset": "embedded-digits",
            "weights": str(ROOT / "assets" / "embedded-digits"), "device": "cpu", "resolution": 32, "steps": 2,
            "guidance": 3.0, "batch": 2, "options": {}, "gpus": 1}
    for i in range(n):
        w = WorkerProcess("candidate", tree, target, 1, tmp / f"w{i}.log", 300, policy)
        t = time.perf_counter()
        w.start()
        w.request("build", spec=spec)
        w.generate([["7", 1], ["3", 2]], resolution=32)
        started = time.perf_counter() - t
        t = time.perf_counter()
        w.close()
        print(f"worker {i + 1}: start, build and one generate {started:.2f} s; close {time.perf_counter() - t:.3f} s")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
