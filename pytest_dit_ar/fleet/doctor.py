"""What `dit-ar fleet doctor` checks on every node of the cluster (run there by the Ray executor; no Ray here).

A node may judge when: the sandbox works there, its harness is the control node's (version and a digest of the
installed code), the lanes' weights that live outside the repository hash the same as on the control node (a
replica carries the repository, not an outside folder), and Ray's token authentication is on (an open Ray
cluster runs anyone's code on the GPU nodes, outside any sandbox). Cgroups are reported: without a writable
cgroup the freezer falls back to SIGSTOP, and Ray's own resource isolation (`ray start
--enable-resource-isolation`) takes the cgroup tree over, so the harness cannot make its freezer groups there.
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
from ..worker import cgroup, sandbox

AUTH_VARIABLE = "RAY_AUTH_MODE"


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
                      {w: folder_digest(w) for w in weights})


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
    out = []
    if report.ray_cgroup:
        out.append("Ray's resource isolation holds this node's cgroups: the freezer cannot make its groups "
                   "(start Ray without --enable-resource-isolation)")
    if "no writable cgroup v2" in report.cgroups and "freezer" not in report.cgroups:
        out.append(f"no writable cgroup ({report.cgroups}): the freezer falls back to SIGSTOP")
    return out
