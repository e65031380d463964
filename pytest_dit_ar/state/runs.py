"""One run folder (`.autoresearch/runs/<id>/`): its file names, spelled once, and typed readers of its records.

Like pyperf's `BenchmarkSuite` and asv's `Results`, every JSON record of a run carries a format version
(`format_version`, written by `write_record`). A record written before versions existed reads as version 1;
a record of a newer format is refused with a line that names it. The readers also upgrade the shapes earlier
harnesses wrote (per-block statistics before the sequential test, `aa_block`, `noise_ci_ratio`), so the
report and `dit-ar status` read every run as types and never by string key. perf.json's schema, shared by its
writer and its readers, is state/perf_record.py's.

Who writes which file: `state.records` the run record and the baseline copy, `loop.evidence` the crash log and
the quality and perf records, `loop.quality.assess` the difference pictures, the worker launcher the worker logs,
`dit-ar profile` the profile record, `loop.revalidate` the re-validation record.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .baseline import BASELINE_RECORD, CASES, BaselineSummary
from .best import BestRecord
from .files import fields_from, load_record, read_json_object
from .ledger import LedgerRow
from .paths import StatePaths
from .perf_record import PERF_FORMAT, PerfRecord
from .phases import PhaseTimes
from .roles import RoleCheck
from .session import SessionRecord
from .timed_quality import TimedQuality

if TYPE_CHECKING:  # imported on use: torch stays out of `dit-ar status`
    from quality_suite.assessment import QualityAssessment

EXPERIMENT_RECORD = "experiment.json"
PERF_RECORD = "perf.json"
QUALITY_RECORD = "quality.json"
PROFILE_RECORD = "profile.json"
REVALIDATION_RECORD = "revalidate.json"
TRACE = "trace.json"
CRASH_LOG = "crash.txt"
WORST_CASES = "worst_cases.png"
DIFFS = "diffs"
PROFILE_PREFIX = "profile-"


@dataclass(frozen=True)
class RunPaths:
    """Every file a run folder may hold."""

    dir: Path

    @property
    def experiment(self) -> Path:
        return self.dir / EXPERIMENT_RECORD

    @property
    def baseline(self) -> Path:
        """A baseline run's copy of baseline.json (its A/A segment is the run's timing)."""
        return self.dir / BASELINE_RECORD

    @property
    def perf(self) -> Path:
        return self.dir / PERF_RECORD

    @property
    def quality(self) -> Path:
        return self.dir / QUALITY_RECORD

    @property
    def profile(self) -> Path:
        return self.dir / PROFILE_RECORD

    @property
    def trace(self) -> Path:
        return self.dir / TRACE

    @property
    def crash(self) -> Path:
        return self.dir / CRASH_LOG

    @property
    def worst_cases(self) -> Path:
        return self.dir / WORST_CASES

    @property
    def diffs(self) -> Path:
        """Per-case difference pictures of the failing cases."""
        return self.dir / DIFFS

    @property
    def cases(self) -> Path:
        """The candidate's case images (where a run keeps them)."""
        return self.dir / CASES

    def case_image(self, case_id: str) -> Path:
        return self.cases / f"{case_id}.png"

    @property
    def revalidation(self) -> Path:
        return self.dir / REVALIDATION_RECORD

    def worker_log(self, side: str, tag: str = "") -> Path:
        """`worker-<side>[-<tag>].log`: one worker process's stderr."""
        return self.dir / (f"worker-{side}-{tag}.log" if tag else f"worker-{side}.log")

    def logs(self) -> tuple[str, ...]:
        return tuple(sorted(p.name for p in self.dir.glob("*.log")))

    def crash_text(self, limit: int = 3000) -> str | None:
        """The crash log's text (cut at `limit` characters), None when the run did not crash."""
        if not self.crash.is_file():
            return None
        return self.crash.read_text(encoding="utf-8", errors="replace")[:limit]

    def crash_headline(self) -> str | None:
        """The crash log's first line."""
        text = self.crash_text(limit=10_000)
        lines = text.strip().splitlines() if text else []
        return lines[0] if lines else None

    def write_crash(self, error: str, details: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.crash.write_text(f"{error}\n\n{details}\n", encoding="utf-8")


def profile_folders(runs: Path) -> list[Path]:
    """The `dit-ar profile` run folders, newest first."""
    found = [p.parent for p in runs.glob(f"{PROFILE_PREFIX}*/{PROFILE_RECORD}")]
    return sorted(found, key=lambda p: (p / PROFILE_RECORD).stat().st_mtime, reverse=True)


def profile_run_id() -> str:
    """The folder name of a `dit-ar profile` run: `profile-<time>-<pid>`."""
    return f"{PROFILE_PREFIX}{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


# -- experiment.json -----------------------------------------------------------------------------

@dataclass(frozen=True)
class LogCutRecord:
    """A worker log cut at the cap: its name and the bytes of output dropped (worker/log_relay.py)."""

    name: str
    dropped_bytes: int


@dataclass(frozen=True)
class LogsRecord:
    """experiment.json's `logs`: the cap of each worker's log (MiB) and the logs cut at it."""

    cap_mb: float | None = None  # None: recorded before the cap existed
    cut: tuple[LogCutRecord, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"cap_mb": self.cap_mb, "cut": [dataclasses.asdict(c) for c in self.cut]}

    @classmethod
    def from_dict(cls, data: Any) -> LogsRecord:
        data = _mapping(data)
        cap = data.get("cap_mb")
        return cls(float(cap) if isinstance(cap, (int, float)) else None,
                   tuple(fields_from(LogCutRecord, c) for c in data.get("cut") or () if isinstance(c, Mapping)))

    def line(self) -> str | None:
        """The summary's line when a log was cut, else None."""
        if not self.cut:
            return None
        names = ", ".join(f"{c.name} ({c.dropped_bytes / 2**20:.1f} MiB dropped)" for c in self.cut[:4])
        more = f" and {len(self.cut) - 4} more" if len(self.cut) > 4 else ""
        return f"worker logs cut at {self.cap_mb:g} MiB each (performance.worker_log_mb): {names}{more}"


@dataclass(frozen=True)
class ExperimentRecord:
    """experiment.json: the ledger row of the run (None when the record is partial), the verdict's reasons,
    the wall time and where it went, the software stack, the worker logs cut at their cap, the best's side-blind
    A/A when the run did one, and the timed outputs judged on the task."""

    row: LedgerRow | None
    reasons: tuple[str, ...] = ()
    duration_s: float | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    software: dict[str, Any] = field(default_factory=dict)
    phases: PhaseTimes | None = None  # where the wall time went, by phase (None: recorded before the phases)
    logs: LogsRecord = field(default_factory=LogsRecord)
    role_check: RoleCheck | None = None
    timed_quality: TimedQuality | None = None  # the timed outputs judged on the task (None: not judged)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExperimentRecord:
        try:
            row = LedgerRow.from_dict(data)
        except (TypeError, ValueError):
            row = None
        check = data.get("role_check")
        return cls(row, tuple(str(r) for r in data.get("reasons") or ()), data.get("duration_s"),
                   {str(k): float(v) for k, v in _mapping(data.get("seconds")).items()
                    if isinstance(v, (int, float))}, _mapping(data.get("software")),
                   PhaseTimes.from_dict(data.get("phases")), LogsRecord.from_dict(data.get("logs")),
                   fields_from(RoleCheck, check) if isinstance(check, Mapping) else None,
                   TimedQuality.from_dict(data.get("timed_quality")))


def read_experiment(run_dir: Path) -> ExperimentRecord:
    return ExperimentRecord.from_dict(load_record(RunPaths(run_dir).experiment))


# -- perf.json -----------------------------------------------------------------------------------

def read_perf(run_dir: Path) -> PerfRecord | None:
    """The run's perf.json (state/perf_record.py's schema), None when it has none."""
    path = RunPaths(run_dir).perf
    data = load_record(path, PERF_FORMAT)
    return PerfRecord.from_dict(data, str(path)) if data else None


def read_timing(run_dir: Path) -> PerfRecord | None:
    """The run's timing: its perf.json, else (a baseline run) its baseline copy's A/A segment."""
    perf = read_perf(run_dir)
    if perf is not None:
        return perf
    baseline = read_baseline(RunPaths(run_dir).baseline)
    return PerfRecord.aa_segment(baseline) if baseline else None


# -- records read for a view (the report, `dit-ar status`) ------------------------------------------

_EMPTY = {"str": "", "bool": False, "int": 0, "float": 0.0}


def _prefilled(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` with every required field of dataclass `cls` that it lacks set to an empty value of its type
    (a record written by hand or by an earlier version still reads; a view shows what is there)."""
    filled = dict(data)
    for f in dataclasses.fields(cls):
        if f.name not in filled and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kind = str(f.type).split("[", 1)[0]
            filled[f.name] = _EMPTY.get(kind, [] if kind == "tuple" else {})
    return filled


def read_session(paths: StatePaths) -> SessionRecord | None:
    """session.json for a view, None before `dit-ar init`."""
    data = read_json_object(paths.session)
    return SessionRecord.from_dict(_prefilled(SessionRecord, data)) if data else None


def read_bests(paths: StatePaths) -> dict[str, BestRecord]:
    """best.json for a view: every lane's best record."""
    return {lane_id: BestRecord.from_dict(_prefilled(BestRecord, rec))
            for lane_id, rec in read_json_object(paths.best).items() if isinstance(rec, Mapping)}


# -- revalidate.json ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Estimate:
    """An improvement in per cent with its 95% interval (a re-validation's measured or product figure)."""

    estimate_pct: float | None = None
    lower_pct: float | None = None
    upper_pct: float | None = None


@dataclass(frozen=True)
class HoldoutRecord:
    """A re-validation's holdout judgement as recorded (`loop.quality.holdout.HoldoutResult.as_dict` plus its line)."""

    effective_class: str | None = None
    cases: int | None = None
    passed: int | None = None
    ok: bool | None = None
    note: str = ""
    headline: str = ""


@dataclass(frozen=True)
class RevalidationRecord:
    """revalidate.json (what `loop.revalidate.Revalidation.as_dict` writes), read for a view."""

    run_id: str | None = None
    best_commit: str | None = None
    baseline_commit: str | None = None
    segments: int | None = None
    rounds: int | None = None
    created: str = ""
    measured: Estimate | None = None
    product: Estimate | None = None
    steps: int = 0
    holdout: HoldoutRecord | None = None
    headline: str | None = None
    agree: bool | None = None
    warning: str | None = None
    role_check: RoleCheck | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RevalidationRecord:
        def estimate(key: str) -> Estimate | None:
            value = data.get(key)
            return fields_from(Estimate, value) if isinstance(value, Mapping) and value else None

        held, check = data.get("holdout"), data.get("role_check")
        values = {k: data[k] for k in ("run_id", "best_commit", "baseline_commit", "segments", "rounds", "headline",
                                       "agree", "warning") if k in data}
        return cls(**values, created=str(data.get("created") or ""), measured=estimate("measured"),
                   product=estimate("product"), steps=len(data.get("steps") or ()),
                   holdout=fields_from(HoldoutRecord, held) if isinstance(held, Mapping) and held else None,
                   role_check=fields_from(RoleCheck, check) if isinstance(check, Mapping) else None)


def read_revalidation(run_dir: Path) -> RevalidationRecord | None:
    """A re-validation run's record, None when it has none."""
    data = load_record(RunPaths(run_dir).revalidation)
    return RevalidationRecord.from_dict(data) if data else None


# -- quality.json and baseline.json --------------------------------------------------------------

def read_quality(run_dir: Path) -> QualityAssessment | None:
    from quality_suite.assessment import QualityAssessment

    data = load_record(RunPaths(run_dir).quality)
    return QualityAssessment.from_dict(data) if data else None


def read_baseline(path: Path) -> BaselineSummary | None:
    """A baseline.json (a lane's or a baseline run's copy), None when absent; earlier key names upgraded."""
    data = load_record(path)
    return BaselineSummary.from_dict(_prefilled(BaselineSummary, data)) if data else None


# -- profile.json --------------------------------------------------------------------------------

PROFILE_FACTS = ("device", "batch", "steps", "stage_basis", "total_ms", "median_plain_ms", "denoise_per_step_ms",
                 "achieved_tflops", "percent_of_peak", "roofline_ms")


@dataclass(frozen=True)
class TopOp:
    name: str
    self_ms: float | None
    calls: int | None


@dataclass(frozen=True)
class ProfileRecord:
    """profile.json of `dit-ar profile`: stage times, headline figures and top ops (shapes of earlier
    versions read too)."""

    lane_id: str | None
    commit: str | None
    stages: dict[str, float]
    facts: tuple[tuple[str, str | int | float], ...]
    top_ops: tuple[TopOp, ...]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProfileRecord:
        summary = _mapping(data.get("summary"))
        facts = tuple((k, v) for k in PROFILE_FACTS
                      if isinstance(v := data.get(k, summary.get(k)), (str, int, float)))
        ops = tuple(TopOp(str(op.get("name")), op.get("self_ms"), op.get("calls"))
                    for op in summary.get("top_ops") or () if isinstance(op, Mapping))
        commit = data.get("commit")
        return cls(data.get("lane_id"), str(commit) if commit else None,
                   stage_ms(data.get("stages") or summary.get("stage_ms") or data.get("stage_ms")), facts, ops)


def stage_ms(stages: Any) -> dict[str, float]:
    """Stage name -> ms from the shapes a profile may use: numbers, {ms|mean_ms|...}, or a list of records."""
    if isinstance(stages, list):
        stages = {str(s.get("name", i)): s for i, s in enumerate(stages) if isinstance(s, Mapping)}
    if not isinstance(stages, Mapping):
        return {}
    out = {}
    for name, value in stages.items():
        if isinstance(value, Mapping):
            value = next((value[k] for k in ("ms", "median_ms", "mean_ms", "total_ms") if k in value), None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[str(name)] = float(value)
    return out


@dataclass(frozen=True)
class Arithmetic:
    """What a profile of one commit says of its arithmetic: achieved TFLOP/s, the share of the card's peak it is,
    the peak (and whether it was measured) and how the FLOPs were counted (`replica`: a graphed pipeline's
    operators counted again on a replica built under the counter)."""

    commit: str
    achieved_tflops: float
    percent_of_peak: float
    peak_tflops: float | None
    peak_source: str
    flops_method: str

    def line(self) -> str:
        peak = f" of the card's {self.peak_tflops:.0f} TFLOP/s ({self.peak_source})" if self.peak_tflops else ""
        method = f"; FLOPs counted {'on a replica' if self.flops_method == 'replica' else self.flops_method}" \
            if self.flops_method else ""
        return (f"{self.achieved_tflops:.1f} TFLOP/s achieved, {self.percent_of_peak:.1f}%{peak}{method} "
                f"(`dit-ar profile` of {self.commit[:10]})")


def arithmetic_of(runs: Path, lane_id: str, commit: str) -> Arithmetic | None:
    """The newest profile of `commit` (its first ten characters, clean) on this lane: its arithmetic."""
    for folder in profile_folders(runs):
        data = load_record(RunPaths(folder).profile)
        record = ProfileRecord.from_dict(data)
        if (record.lane_id or lane_id) != lane_id or not record.commit or not commit.startswith(record.commit):
            continue
        summary = _mapping(data.get("summary"))
        achieved, share = summary.get("achieved_tflops"), summary.get("percent_of_peak")
        if not isinstance(achieved, (int, float)) or not isinstance(share, (int, float)):
            return None
        peak = _mapping(summary.get("peak"))
        tflops = peak.get("tflops")
        return Arithmetic(record.commit, float(achieved), float(share),
                          float(tflops) if isinstance(tflops, (int, float)) else None,
                          str(peak.get("source") or ""), str(summary.get("flops_method") or ""))
    return None


def latest_profile(runs: Path, lane_id: str) -> tuple[Path, ProfileRecord] | None:
    """The newest profile run of this lane (or naming no lane): its folder and record."""
    for folder in profile_folders(runs):
        record = ProfileRecord.from_dict(load_record(RunPaths(folder).profile))
        if (record.lane_id or lane_id) == lane_id:
            return folder, record
    return None
