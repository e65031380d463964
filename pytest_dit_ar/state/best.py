"""best.json: the current best commit of each lane, as typed records (written by state.records)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dit_ar_contract.classes import MILDEST
from dit_ar_contract.errors import Refused

from .files import read_json
from .paths import StatePaths


@dataclass(frozen=True)
class Measurements:
    median_ms: float | None = None
    p95_ms: float | None = None


@dataclass(frozen=True)
class BestRecord:
    commit: str
    tag: str
    branch: str
    run_id: str
    updated: str
    ref: str
    measurements: Measurements = field(default_factory=Measurements)
    effective_class: str = MILDEST.word  # against the original baseline; inherited by later candidates
    history: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["history"] = list(self.history)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BestRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["measurements"] = Measurements(**{k: v for k, v in (data.get("measurements") or {}).items()
                                                 if k in ("median_ms", "p95_ms")})
        values["history"] = tuple(data.get("history") or ())
        return cls(**values)


def read_best(paths: StatePaths) -> dict[str, BestRecord]:
    """Every lane's best record (empty before the first baseline)."""
    data = read_json(paths.best, {}) or {}
    return {lane_id: BestRecord.from_dict(rec) for lane_id, rec in data.items() if isinstance(rec, dict)}


def require_best(best: BestRecord | None, lane_id: str) -> BestRecord:
    if best is None:
        raise Refused(f"no best commit for lane {lane_id}: run `dit-ar baseline` first")
    return best
