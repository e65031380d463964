"""The stored baseline of a lane: its summary (baseline.json), its manifest check and its case artifacts.

The manifest check lives here and only here: every reader of a baseline goes through `verify_baseline`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dit_ar_contract.device import DeviceIdentity
from dit_ar_contract.digest import sha256_file
from dit_ar_contract.errors import Refused

from . import integrity
from .files import load_record, read_json


@dataclass(frozen=True)
class BaselineTiming:
    """The baseline's timing: its latency and one A/A segment (the tree against itself, two processes)."""

    median_ms: float | None = None
    p95_ms: float | None = None
    noise_floor_pct: float | None = None
    noise_interval_pct: tuple[float, ...] = ()
    seconds: dict[str, float] = field(default_factory=dict)
    aa_segment: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Roofline:
    """What the roofline flag needs: the baseline's FLOPs per batch and the device's peak."""

    flops_per_batch: float | None = None
    flops_rows_per_image: float | None = None
    device_peak_tflops: float | None = None
    device_peak: dict[str, Any] = field(default_factory=dict)
    roofline_unavailable: str | None = None
    flops_graph_replays: int = 0  # CUDA graph replays the FLOP count could not see into (its FLOPs are then low)

    @property
    def peak_measured(self) -> bool:
        """The device's peak was timed on this machine (perf_suite.roofline.Peak.measured), not a datasheet's."""
        return bool(self.device_peak.get("measured"))


ROOFLINE_KEYS = tuple(f.name for f in dataclasses.fields(Roofline))


@dataclass(frozen=True)
class BaselineSummary:
    """baseline.json. Nested worker records (audit evidence, envelope runs, environment) stay as JSON."""

    lane: str
    lane_id: str
    commit: str
    run_id: str
    created: str
    cases: tuple[str, ...]
    corpus_sha256: str
    workload: dict[str, Any]
    environment: dict[str, Any]
    evidence: dict[str, Any]
    envelope: dict[str, float]
    envelope_runs: dict[str, Any]
    task_metrics: dict[str, float]
    task_case_pass: dict[str, bool]
    timing: BaselineTiming
    roofline: Roofline = field(default_factory=Roofline)
    generation_seconds: float = 0.0
    task_envelope: dict[str, float] = field(default_factory=dict)
    task_resolution: dict[str, float] = field(default_factory=dict)  # what a harmless change does to each score
    # margin source -> metric -> the spread of a degradation at that margin (quality_suite/margin_spread.py)
    task_spread: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    @property
    def device(self) -> DeviceIdentity:
        """The device the baseline ran on, as its worker reported it."""
        return DeviceIdentity.from_dict(self.environment.get("device"))

    @property
    def workload_device(self) -> str:
        return str(self.workload.get("device", ""))

    @property
    def gpus(self) -> int:
        return int(self.workload.get("gpus", 1))

    @property
    def batch(self) -> int:
        return int(self.workload.get("batch", 1))

    def as_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "roofline"}
        data["cases"] = list(self.cases)
        data["timing"] = dataclasses.asdict(self.timing)
        data.update(dataclasses.asdict(self.roofline))  # flat in the file, as earlier versions wrote it
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BaselineSummary:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        timing = dict(data.get("timing") or {})
        if "aa_block" in timing:  # written before the sequential test's segments
            timing.setdefault("aa_segment", timing["aa_block"])
        timing_keys = {f.name for f in dataclasses.fields(BaselineTiming)}
        values["timing"] = BaselineTiming(**{k: v for k, v in timing.items() if k in timing_keys})
        values["roofline"] = Roofline(**{k: data[k] for k in ROOFLINE_KEYS if k in data})
        values["cases"] = tuple(data.get("cases") or ())
        return cls(**values)


BASELINE_RECORD = "baseline.json"  # the summary's file in the lane's baseline folder and in the baseline's run


CASES = "cases"  # the case images of a baseline folder and of a run folder


def cases_dir(folder: Path) -> Path:
    return folder / CASES


def manifest_problems(folder: Path) -> list[str] | None:
    """Differences between a baseline folder and its manifest; None when there is no manifest."""
    manifest = read_json(folder / integrity.MANIFEST)
    if not manifest:
        return None
    return integrity.diff(manifest["files"], integrity.manifest_of(folder))


def verify_baseline(folder: Path, lane_id: str, recorded_manifest_sha256: str | None) -> BaselineSummary:
    """Check the artifacts against their manifest, and the manifest against session.json's copy."""
    problems = manifest_problems(folder)
    if problems is None:
        raise Refused(f"no baseline for lane {lane_id} in {folder}: run `dit-ar baseline` first")
    if recorded_manifest_sha256 and recorded_manifest_sha256 != sha256_file(folder / integrity.MANIFEST):
        raise Refused(f"{folder / integrity.MANIFEST} differs from the copy recorded in session.json: "
                      "the baseline was tampered with; start a new session (`dit-ar init --tag NEW`)")
    if problems:
        raise Refused(f"the baseline in {folder} does not match its manifest ({'; '.join(problems[:5])}); "
                      "run `dit-ar recover`, or start a new session (`dit-ar init --tag NEW`)")
    return BaselineSummary.from_dict(load_record(folder / BASELINE_RECORD))
