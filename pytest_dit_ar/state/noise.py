"""noise.json: what the session has learned about the between-process noise of each lane (typed records).

Per lane id:
* `profile`: the machine's calibration (`dit-ar calibrate`: A/A pairs of the best against itself); its
  bound is the statistics' prior. Replaced only by a complete calibration run.
* `best_commit` and `spreads`: every finished experiment's between-pair spread against that best (each
  adds pairs - 1 degrees of freedom, perf_suite.sequential.pooled_bound). A new best restarts the list.

Written atomically (state.files.write_json_atomic); an experiment holds the session lock while it writes.
The prior when no profile exists is the lane's `offset_bound_pct` or the default of the lane's kind.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dit_ar_contract.config import PerfProtocol
from perf_suite.sequential import OffsetBound, PairSpread, pooled_bound

from .files import read_json_object, write_json_atomic
from .paths import StatePaths

NOISE_FILE = "noise.json"


def noise_path(paths: StatePaths) -> Path:
    return paths.dir / NOISE_FILE


@dataclass(frozen=True)
class NoiseProfile:
    """One complete calibration run on a lane: the A/A spread and what it implies."""

    lane_id: str
    measured: str  # ISO time
    best_commit: str  # the tree timed against itself
    pairs: int
    rounds: int  # per pair
    spread: PairSpread
    bound_pct: float  # B from this calibration alone (upper bound_confidence bound)
    sigma_b_pct: float  # point estimate sqrt(max(s^2 - W, 0))
    round_sd_pct: float  # per-round sd of the log ratios (winsorized, pooled over pairs)
    latency_ms: float  # median generate of the calibrated tree
    rounds_for: dict[str, int | None] = field(default_factory=dict)  # "5" -> rounds per pair for 80% power
    injected: dict[str, float] = field(default_factory=dict)  # injected speedup % -> estimated %

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NoiseProfile:
        values = {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data}
        values["spread"] = PairSpread(**data["spread"])
        return cls(**values)


@dataclass(frozen=True)
class SpreadEntry:
    run_id: str
    spread: PairSpread


@dataclass(frozen=True)
class LaneNoise:
    lane_id: str
    profile: NoiseProfile | None = None
    best_commit: str | None = None
    spreads: tuple[SpreadEntry, ...] = ()

    def against(self, best_commit: str | None) -> LaneNoise:
        """The state for experiments against `best_commit`: the pool restarts when the best changed."""
        if best_commit == self.best_commit:
            return self
        return dataclasses.replace(self, best_commit=best_commit, spreads=())

    def prior(self, protocol: PerfProtocol, device: str) -> OffsetBound:
        if self.profile is not None:
            return OffsetBound.of_pct(self.profile.bound_pct, f"calibration of {self.profile.measured[:10]}")
        if protocol.offset_bound_pct is not None:
            return OffsetBound.of_pct(protocol.offset_bound_pct, "the lane's offset_bound_pct")
        return OffsetBound.default(device)

    def bound(self, protocol: PerfProtocol, device: str) -> OffsetBound:
        """B for the next experiment: the prior until enough spread is pooled against the current best (a
        calibration of the current best counts as pooled spread too)."""
        pool = [e.spread for e in self.spreads]
        if self.profile is not None and self.profile.best_commit == self.best_commit:
            pool.append(self.profile.spread)
        return pooled_bound(self.prior(protocol, device), pool, protocol.bound_confidence, protocol.bound_min_df)

    def as_dict(self) -> dict[str, Any]:
        return {"lane_id": self.lane_id, "profile": self.profile.as_dict() if self.profile else None,
                "best_commit": self.best_commit,
                "spreads": [{"run_id": e.run_id, **e.spread.as_dict()} for e in self.spreads]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LaneNoise:
        profile = NoiseProfile.from_dict(data["profile"]) if data.get("profile") else None
        spreads = tuple(SpreadEntry(e["run_id"], PairSpread(int(e["pairs"]), float(e["spread_var"]),
                                                            float(e["within_var"])))
                        for e in data.get("spreads") or ())
        return cls(data["lane_id"], profile, data.get("best_commit"), spreads)


def read_noise(paths: StatePaths, lane_id: str) -> LaneNoise:
    """The lane's noise state (empty when none was learned; an unreadable entry counts as none)."""
    entry = read_json_object(noise_path(paths)).get(lane_id)
    try:
        return LaneNoise.from_dict(entry) if isinstance(entry, dict) else LaneNoise(lane_id)
    except (KeyError, TypeError, ValueError):
        return LaneNoise(lane_id)


def write_noise(paths: StatePaths, noise: LaneNoise) -> None:
    data = read_json_object(noise_path(paths))
    data[noise.lane_id] = noise.as_dict()
    write_json_atomic(noise_path(paths), data)


def record_spread(paths: StatePaths, lane_id: str, best_commit: str | None, run_id: str,
                  spread: PairSpread | None) -> LaneNoise:
    """Add one finished experiment's spread against `best_commit` (restarting the pool on a new best)."""
    noise = read_noise(paths, lane_id).against(best_commit)
    if spread is not None:
        noise = dataclasses.replace(noise, spreads=noise.spreads + (SpreadEntry(run_id, spread),))
    write_noise(paths, noise)
    return noise


def store_profile(paths: StatePaths, profile: NoiseProfile) -> LaneNoise:
    """Make `profile` the lane's prior (a complete calibration only); the pool against its best is kept."""
    noise = dataclasses.replace(read_noise(paths, profile.lane_id), profile=profile)
    write_noise(paths, noise)
    return noise
