"""What `dit-ar fleet doctor` checks on every node of the cluster (run there by the Ray executor; no Ray here).

A node may judge when: the sandbox works there, its harness is the control node's (version and a digest of the
installed code), the lanes' weights that live outside the repository hash the same as on the control node (a
replica carries the repository, not an outside folder), and Ray's token authentication is on (an open Ray
cluster runs anyone's code on the GPU nodes, outside any sandbox). Cgroups are reported: without a writable
cgroup the freezer falls back to SIGSTOP, and Ray's own resource isolation (`ray start
--enable-resource-isolation`) takes the cgroup tree over, so the harness cannot make its freezer groups there.

Memory: each node says what holds a worker's hard memory limit there (a memory cgroup, else RLIMIT_DATA, weaker)
and the settings its raylet runs Ray's memory monitor with (its workers inherit the raylet's environment; Ray
reads them only at `ray start`). The slots' limits are derived to stay under `2 * host_limit.HOST_MEMORY_SHARE` of
a node; a monitor threshold below `MONITOR_THRESHOLD_MIN` could kill judges whose candidates are within their
limits (each such loss is a named harness error, `ray-oom`), and a monitor that is off leaves the kernel's OOM
killer as the last line (it may kill a raylet: `node-lost`). Both are warnings (docs/design/scale.md).
"""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from dit_ar_contract import device
from dit_ar_contract.digest import sha256_file

from .. import __version__
from ..worker import cgroup, host_limit, sandbox

AUTH_VARIABLE = "RAY_AUTH_MODE"
THRESHOLD_VARIABLE, REFRESH_VARIABLE = "RAY_memory_usage_threshold", "RAY_memory_monitor_refresh_ms"
RAY_THRESHOLD_DEFAULT, RAY_REFRESH_DEFAULT_MS = 0.95, 250  # Ray's own (src/ray/common/ray_config_def.h)
MONITOR_THRESHOLD_MIN = 2 * host_limit.HOST_MEMORY_SHARE + 0.1  # both sides of every slot at their limits, and room


@dataclass(frozen=True)
class NodeReport:
    host: str
    version: str
    harness: str  # digest of the installed harness's code
    sandbox: str | None  # None: bubblewrap works here; else why not
    cgroups: str
    ray_cgroup: bool  # this process sits in a cgroup Ray made (its resource isolation is on)
    gpus: tuple[str, ...]  # "index name uuid"
    auth: str  # RAY_AUTH_MODE as the node's processes see it
    weights: dict[str, str] = field(default_factory=dict)  # path -> digest ("missing" when absent)
    memory_limit: str = ""  # what holds a worker's hard memory limit here (cgroup.memory_limit_kind)
    memory_mb: float = 0.0  # the node's memory as the harness counts it (host_limit.machine_mb)
    monitor: tuple[float, int] = (RAY_THRESHOLD_DEFAULT, RAY_REFRESH_DEFAULT_MS)  # Ray's memory monitor here


def harness_digest() -> str:
    """sha256 over the installed harness's Python files (names and contents), in a stable order."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + sha256_file(path).encode())
    return h.hexdigest()


def folder_digest(path: str) -> str:
    """sha256 over a weights folder's files (names and contents), or `missing`."""
    base = Path(path)
    if not base.exists():
        return "missing"
    files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(base.parent).as_posix().encode() + b"\0" + sha256_file(p).encode())
    return h.hexdigest()


def in_ray_cgroup() -> bool:
    try:
        return any("ray" in line.split(":", 2)[-1] for line in Path("/proc/self/cgroup").read_text().splitlines())
    except OSError:
        return False


def node_report(weights: tuple[str, ...]) -> NodeReport:
    """This node's answers (called in a task placed on it)."""
    mask = os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # every GPU of the node, not the task's own mask
    try:
        gpus = tuple(f"{g.index} {g.name} {g.uuid}" for g in device.list_gpus())
    finally:
        if mask is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = mask
    return NodeReport(socket.gethostname(), __version__, harness_digest(), sandbox.available(), cgroup.describe(),
                      in_ray_cgroup(), gpus, os.environ.get(AUTH_VARIABLE, ""),
                      {w: folder_digest(w) for w in weights}, cgroup.memory_limit_kind(), host_limit.machine_mb(),
                      monitor_settings())


def monitor_settings() -> tuple[float, int]:
    """Ray's memory monitor as this node's raylet runs it: (usage threshold, refresh ms; 0 is off)."""
    try:
        threshold = float(os.environ.get(THRESHOLD_VARIABLE) or RAY_THRESHOLD_DEFAULT)
        refresh = int(os.environ.get(REFRESH_VARIABLE) or RAY_REFRESH_DEFAULT_MS)
    except ValueError:
        return RAY_THRESHOLD_DEFAULT, RAY_REFRESH_DEFAULT_MS
    return threshold, refresh


def memory_line(report: NodeReport) -> str:
    """What holds a worker's memory on the node and how Ray's monitor runs there (`fleet doctor` and `fleet up`)."""
    threshold, refresh = report.monitor
    monitor = f"every {refresh} ms over {threshold:.2f} of the node" if refresh else "off"
    return (f"memory {report.memory_mb / 1024:.0f} GiB; each worker's limit held by {report.memory_limit or '?'}; "
            f"Ray's memory monitor {monitor}")


def problems(report: NodeReport, control: NodeReport) -> list[str]:
    """Why this node may not judge for a fleet controlled from `control` (empty: it may)."""
    out = []
    if report.sandbox:
        out.append(f"no sandbox: {report.sandbox}")
    if (report.version, report.harness) != (control.version, control.harness):
        out.append(f"harness {report.version} ({report.harness[:12]}) differs from the control node's "
                   f"{control.version} ({control.harness[:12]}): install the same wheel on every node")
    for path, digest in report.weights.items():
        if digest != control.weights.get(path):
            out.append(f"weights {path}: {digest[:12]} here, {str(control.weights.get(path))[:12]} on the control "
                       "node: stage the same files on every node")
    if report.auth != "token":
        out.append(f"Ray's token authentication is off ({AUTH_VARIABLE}={report.auth or 'unset'}): start every "
                   f"node with {AUTH_VARIABLE}=token")
    return out


def warnings(report: NodeReport) -> list[str]:
    out = memory_warnings(report)
    if report.ray_cgroup:
        out.append("Ray's resource isolation holds this node's cgroups: the freezer cannot make its groups "
                   "(start Ray without --enable-resource-isolation)")
    if "no writable cgroup v2" in report.cgroups and "freezer" not in report.cgroups:
        out.append(f"no writable cgroup ({report.cgroups}): the freezer falls back to SIGSTOP")
    return out


def memory_warnings(report: NodeReport) -> list[str]:
    out = []
    if report.memory_limit == "RLIMIT_DATA":
        out.append("no writable memory cgroup (cgroup v2 delegation or v1 memory): each worker's memory limit is "
                   "RLIMIT_DATA, per process and blind to shared memory (worker/host_limit.py)")
    threshold, refresh = report.monitor
    if not refresh:
        out.append(f"Ray's memory monitor is off ({REFRESH_VARIABLE}=0): past the workers' limits the kernel's OOM "
                   "killer decides, and it may take a raylet (start Ray without that setting)")
    elif threshold < MONITOR_THRESHOLD_MIN:
        out.append(f"Ray's memory monitor fires at {threshold:.2f} of the node, below the "
                   f"{MONITOR_THRESHOLD_MIN:.2f} the slots' limits may reach together: it may kill judges whose "
                   f"candidates are within their limits (start Ray with {THRESHOLD_VARIABLE}={RAY_THRESHOLD_DEFAULT})")
    return out
