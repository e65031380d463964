"""Wall and CPU-seconds cost of a cold exec'd worker, a fork server and a fork (embedded-cpu lane, sandboxed).

  python lab/probes/forkserver_cost.py [OUT.json]   # from the repository root; prints JSON

CPU seconds (user + system of the process and its reaped children, from /proc) do not depend on how loaded
the machine is; wall seconds do. A forked worker's figure is fork request to built pipeline.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from dit_ar_contract import device
from dit_ar_contract.config import load_config
from pytest_dit_ar.worker.client import SandboxPolicy, WorkerLauncher
from pytest_dit_ar.worker.forkserver import ForkServers

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15]) / TICK
        except OSError:
            pass
    return total


def main() -> None:
    config = load_config(Path("config/autoresearch.json"))
    lane = config.lane("embedded-cpu")
    launcher = WorkerLauncher(device.resolve_lane(config, lane), 2, 300, SandboxPolicy((), False, (Path.cwd(),)))
    tmp = Path(tempfile.mkdtemp(prefix="forkserver-cost-"))
    root = Path.cwd()
    spec = lane.workload(launcher.model_root(root), root)
    out: dict = {"load_before": os.getloadavg(), "cpus": os.cpu_count()}
    t = time.perf_counter()
    cold = launcher.worker("best", root, tmp / "cold.log").spawn()
    cold.handshake()
    cold.request("build", spec=spec)
    out["cold_worker"] = {"wall_s": time.perf_counter() - t, "cpu_s": cpu_s(cold.processes())}
    cold.close()
    t = time.perf_counter()
    servers = ForkServers(launcher, root, root, tmp, 1)
    servers.cand.spawn().ready()
    zygote = servers.cand.zygotes[0]
    out["fork_server"] = {"wall_s": time.perf_counter() - t, "cpu_s": cpu_s([zygote.host_pid])}
    out["forks"] = []
    for i in range(4):
        t = time.perf_counter()
        worker = servers.cand.fork(f"p{i}")
        worker.handshake()
        hello = time.perf_counter() - t
        worker.request("build", spec=spec)
        out["forks"].append({"hello_s": hello, "ready_s": time.perf_counter() - t, "cpu_s": cpu_s(worker.processes())})
        worker.close()
    out["load_after"] = os.getloadavg()
    servers.close()
    text = json.dumps(out, indent=1)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
