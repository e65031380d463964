"""Device identity, the target contract and which lanes can run on this machine (no CUDA context is made)."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from .config import Config, Lane


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str
    compute_capability: str
    memory_gb: float
    driver: str


@dataclass(frozen=True)
class DeviceIdentity:
    """What a lane runs on: a CPU model or one GPU (by uuid), as recorded in session.json."""

    kind: str  # "cpu", "cuda" or "none"
    name: str = ""
    uuid: str = ""
    compute_capability: str = ""
    memory_gb: float = 0.0
    driver: str = ""
    machine: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in ("", 0.0)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> DeviceIdentity:
        data = data or {}
        known = {f: data[f] for f in cls.__dataclass_fields__ if f in data}
        return cls(**{"kind": "none", **known})

    def same_device(self, other: DeviceIdentity) -> bool:
        """Whether two identities name the same device (uuid for GPUs, model name for CPUs)."""
        if self.kind != other.kind:
            return False
        return self.uuid == other.uuid if self.kind == "cuda" else self.name == other.name


@dataclass(frozen=True)
class LaneTarget:
    """Where a lane runs here: its ledger id, device, environment and whether it is the target GPU."""

    lane: str
    lane_id: str
    device: str
    identity: DeviceIdentity
    on_target: bool
    env: dict[str, str] = field(default_factory=dict)
    memory_cap_gb: float | None = None
    problem: str | None = None

    @property
    def runnable(self) -> bool:
        return self.problem is None


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def list_gpus() -> list[Gpu]:
    """GPUs from nvidia-smi (no CUDA context is created); empty without a driver."""
    if shutil.which("nvidia-smi") is None:
        return []
    query = "index,name,uuid,compute_cap,memory.total,driver_version"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 6:
            gpus.append(Gpu(int(parts[0]), parts[1], parts[2], parts[3], float(parts[4]) / 1024, parts[5]))
    return visible(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))


def visible(gpus: list[Gpu], mask: str | None) -> list[Gpu]:
    """The GPUs a CUDA_VISIBLE_DEVICES value (indices or UUIDs) leaves, in its order."""
    if mask is None:
        return gpus
    out = []
    for item in (x.strip() for x in mask.split(",") if x.strip()):
        match = [g for g in gpus if (item.isdigit() and g.index == int(item)) or g.uuid.startswith(item)]
        if not match:
            break  # CUDA stops at the first invalid entry
        out.append(match[0])
    return out


def matches_target(gpu: Gpu, config: Config) -> bool:
    t = config.target
    return t.device_match.lower() in gpu.name.lower() and gpu.compute_capability == t.compute_capability


def resolve_lane(config: Config, lane: Lane, gpus: list[Gpu] | None = None) -> LaneTarget:
    """Pin the lane to a device: the CPU, the GPU that matches the contract, or a labelled foreign GPU."""
    if not lane.is_cuda:
        identity = DeviceIdentity("cpu", name=cpu_name(), machine=platform.machine())
        return LaneTarget(lane.name, lane.name, "cpu", identity, on_target=True)
    gpus = list_gpus() if gpus is None else gpus
    if lane.device.startswith("cuda:"):
        wanted = int(lane.device.split(":")[1])
        gpus = [g for g in gpus if g.index == wanted]
    if not gpus:
        return LaneTarget(lane.name, lane.name, lane.device, DeviceIdentity("none"), False,
                          problem="no CUDA GPU found (nvidia-smi lists none); this lane needs "
                                  f"a {config.target.name} or, as a foreign lane, another GPU")
    target = [g for g in gpus if matches_target(g, config)]
    pool = target if len(target) >= lane.gpus else gpus
    if len(pool) < lane.gpus:
        return LaneTarget(lane.name, lane.name, lane.device, DeviceIdentity("none"), False,
                          problem=f"lane {lane.name!r} needs {lane.gpus} GPUs and {len(pool)} are visible "
                                  "(nvidia-smi, CUDA_VISIBLE_DEVICES)")
    chosen = pool[:lane.gpus]
    target = target if pool is target else []
    gpu = chosen[0]
    uuids = ",".join(g.uuid for g in chosen)  # the worker sees exactly these, as cuda:0 .. cuda:N-1
    identity = DeviceIdentity("cuda", gpu.name, uuids, gpu.compute_capability, gpu.memory_gb, gpu.driver)
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": uuids}
    cap = lane.guardrails.peak_vram_gb or config.target.vram_gb
    if target:
        return LaneTarget(lane.name, lane.name, "cuda:0", identity, True, env, cap)
    if not config.target.allow_foreign_lanes:
        return LaneTarget(lane.name, lane.name, "cuda:0", identity, False, env,
                          problem=f"{gpu.name} is not the target {config.target.name} and "
                                  "target.allow_foreign_lanes is false")
    return LaneTarget(lane.name, f"{lane.name}@{slug(gpu.name)}", "cuda:0", identity, False, env,
                      cap if gpu.memory_gb > cap else None)
