"""The study's result files, typed (the engine: `pytest_dit_ar.loop.speed.aa_pairs`; the verb: `dit-ar calibrate`).

A study times arms of paired worker processes: `null` (a tree against itself, A/A), one arm per injected true
speedup (named by its percentage: the best side sleeps a known fraction of the latency) and `sandbox-overhead`
(the sandboxed tree against itself unsandboxed). Each arm holds its pairs' round times (`StudyPair`); the whole
run is a `StudyResults`. The file's shape: `arms` (name -> list of pairs), `delays_s` (arm -> seconds) and
`format`; files without one are format 1 (the earliest recorded studies) and read the same. A newer format is
refused, as pyperf and asv refuse one (`from_dict`).

Readers: the calibration (loop/speed/calibration.py) and, beside the product, the lab's studies (lab/studies/: the
measured study's evaluation, the noise regimes fitted to recorded studies). A study's summary is derived data:
it is written beside the results for a reader of the file, and recomputed from the pairs, never read back.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dit_ar_contract.config import PerfProtocol
from dit_ar_contract.sides import Sides

FORMAT = 2  # 1: the same shape without the key; 2 adds `format` and the pairs' fork figures
NULL = "null"
OVERHEAD = "sandbox-overhead"


@dataclass(frozen=True)
class StudyPair:
    """One fresh pair's segment: its timed rounds per side (seconds), warm-up rounds and build times."""

    cand_s: tuple[float, ...]
    best_s: tuple[float, ...]
    warmup_s: Sides[list[float]] = field(default_factory=lambda: Sides.of(lambda _: []))
    build_s: Sides[float] = field(default_factory=lambda: Sides(0.0, 0.0))
    orders: tuple[str, ...] = ()  # per round "CB" or "BC" (the earliest format 1 files lack them)
    problems: tuple[str, ...] = ()
    forked: bool | None = None  # the pair came from the fork servers (None: not recorded, format 1)
    ready_s: Sides[float | None] = field(default_factory=lambda: Sides(None, None))  # forked: fork to hello

    def log_ratios(self, rounds: int | None = None) -> np.ndarray:
        """log(candidate / best) of the first `rounds` rounds (all when None)."""
        return np.log(np.asarray(self.cand_s[:rounds], float) / np.asarray(self.best_s[:rounds], float))

    def as_dict(self) -> dict[str, Any]:
        return {"cand_s": list(self.cand_s), "best_s": list(self.best_s), "warmup_s": self.warmup_s.to_dict(),
                "build_s": self.build_s.to_dict(), "orders": list(self.orders), "problems": list(self.problems),
                "forked": self.forked, "ready_s": self.ready_s.to_dict(skip_none=True)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StudyPair:
        return cls(tuple(map(float, data["cand_s"])), tuple(map(float, data["best_s"])),
                   Sides.from_dict(data.get("warmup_s"), lambda v: [float(x) for x in v or ()]),
                   Sides.from_dict(data.get("build_s"), float, 0.0), tuple(data.get("orders") or ()),
                   tuple(data.get("problems") or ()), data.get("forked"),
                   Sides.from_dict(data.get("ready_s"), lambda v: None if v is None else float(v)))


@dataclass(frozen=True)
class StudyArm:
    """One arm's pairs, in the order they were measured, and the sleep its best side adds (speedup arms)."""

    name: str
    pairs: tuple[StudyPair, ...] = ()
    delay_s: float | None = None

    @property
    def speedup_pct(self) -> float | None:
        """The injected true speedup in percent; None for the null and overhead arms."""
        return None if self.name in (NULL, OVERHEAD) else float(self.name)

    def with_pair(self, pair: StudyPair) -> StudyArm:
        return StudyArm(self.name, (*self.pairs, pair), self.delay_s)

    def log_ratios(self, rounds: int | None = None) -> np.ndarray:
        """(pairs, rounds) log ratios of the first `rounds` rounds of every pair."""
        return np.array([p.log_ratios(rounds) for p in self.pairs])


@dataclass(frozen=True)
class StudyResults:
    """One study run: where it ran, what it measured per arm, and whether a deadline stopped it."""

    lane: str
    lane_id: str
    device: dict[str, Any]
    steps: int
    batch: int
    protocol: dict[str, Any]  # the PerfProtocol it ran with, as recorded
    arms: dict[str, StudyArm] = field(default_factory=dict)
    old_rounds: int = 0
    load: int = 0
    sandboxed: bool | None = None  # None: not recorded (the earliest format 1 files)
    stopped: str | None = None  # why collection stopped early (a deadline), None when complete
    wall_s: float = 0.0
    metric: str = "latency_ms"  # the lane's primary metric (format 1 files: always latency)
    format: int = FORMAT

    def recorded_protocol(self) -> PerfProtocol:
        """The protocol the study was evaluated with, as recorded (fields this harness no longer has are left out)."""
        known = {f.name for f in dataclasses.fields(PerfProtocol)}
        values = {k: v for k, v in self.protocol.items() if k in known}
        if values.get("cpu_affinity") is not None:
            values["cpu_affinity"] = tuple(values["cpu_affinity"])
        return PerfProtocol(**values)

    @property
    def null(self) -> tuple[StudyPair, ...]:
        """The A/A pairs (what a calibration measures)."""
        return self.arms[NULL].pairs if NULL in self.arms else ()

    def speedup_arms(self) -> list[StudyArm]:
        return [a for a in self.arms.values() if a.speedup_pct is not None]

    def as_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "lane": self.lane, "lane_id": self.lane_id, "device": self.device,
                "steps": self.steps, "batch": self.batch, "load": self.load, "protocol": self.protocol,
                "old_rounds": self.old_rounds, "sandboxed": self.sandboxed, "metric": self.metric,
                "arms": {name: [p.as_dict() for p in arm.pairs] for name, arm in self.arms.items()},
                "delays_s": {name: arm.delay_s for name, arm in self.arms.items() if arm.delay_s is not None},
                **({"stopped": self.stopped} if self.stopped else {}), "wall_s": self.wall_s}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StudyResults:
        if not isinstance(data, dict) or "arms" not in data:
            raise ValueError("not a study file: no 'arms'")
        version = int(data.get("format", 1))
        if version > FORMAT:
            raise ValueError(f"study file format version {version!r} not supported (this harness reads up to "
                             f"{FORMAT})")
        delays = data.get("delays_s") or {}
        arms = {name: StudyArm(name, tuple(StudyPair.from_dict(p) for p in pairs),
                               delays.get(name) if name not in (NULL, OVERHEAD) else None)
                for name, pairs in (data.get("arms") or {}).items()}
        return cls(data["lane"], data.get("lane_id", data["lane"]), dict(data.get("device") or {}),
                   int(data.get("steps") or 0), int(data.get("batch") or 0), dict(data.get("protocol") or {}), arms,
                   int(data.get("old_rounds") or 0), int(data.get("load") or 0), data.get("sandboxed"),
                   data.get("stopped"), float(data.get("wall_s") or 0.0), data.get("metric", "latency_ms"), version)

    @classmethod
    def read(cls, path: Path) -> StudyResults:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def write(self, path: Path, summary: dict[str, Any] | None = None) -> Path:
        """Write the results (and, for a reader of the file, the derived summary)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        data = self.as_dict() | ({"summary": summary} if summary is not None else {})
        path.write_text(json.dumps(data, indent=1, default=str))
        return path
