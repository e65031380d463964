"""What `dit-ar fleet status` reports, from the sessions' own files (read only: no lock, no git write, no Ray).

Per session: its slot, whether a judging is in flight (its dispatch record), its counts and its best's speed-up
over its own baseline (both measured in its slot: a ratio is comparable between slots, a latency is not). Per
slot: busy or idle. GPU-seconds: each judging's `fleet.json` (how long it held its slot, times its GPUs), per
experiment and per keep. The fleet's best per lane: the session whose best is the most times faster than its
own baseline. The nearest earlier descriptions of an idea: rapidfuzz over every session's ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rapidfuzz import fuzz, process

from dit_ar_contract.status import Status

from ..state import ledger, runs
from ..state.best import read_best
from ..state.files import read_json_object
from ..state.ledger import LedgerRow
from ..state.paths import StatePaths
from ..state.session import read_record
from . import dispatch as dispatch_file
from .apply import PROVENANCE
from .registry import FleetRecord, FleetSession


@dataclass(frozen=True)
class SessionUsage:
    tag: str
    worktree: str
    slot: str
    lane_id: str
    busy: str  # "" idle; else the judging in flight ("experiment 2026... on host")
    experiments: int
    keeps: int
    slot_seconds: float  # the experiments' time holding the slot
    gpu_seconds: float  # the experiments' GPU-seconds
    all_gpu_seconds: float  # every judging's (baselines, calibrations, re-validations too)
    speedup: float | None  # baseline median / best median, both timed in this session's slot
    best: str

    @property
    def per_experiment(self) -> float | None:
        return self.gpu_seconds / self.experiments if self.experiments else None

    @property
    def per_keep(self) -> float | None:
        return self.gpu_seconds / self.keeps if self.keeps else None


@dataclass(frozen=True)
class Nearest:
    score: float
    tag: str
    row: LedgerRow


def _rows(paths: StatePaths) -> list[LedgerRow]:
    return ledger.read(paths.ledger) if paths.ledger.exists() else []


def session_usage(entry: FleetSession) -> SessionUsage:
    root = Path(entry.worktree)
    paths = StatePaths(root)
    record = read_record(paths)
    lane_id = record.lane_id if record else ""
    rows = [r for r in _rows(paths) if r.lane == lane_id]
    pending = dispatch_file.read(paths)
    busy = f"{pending.kind} {pending.run_id} on {pending.host or '(waiting for the slot)'}" if pending else ""
    seconds = {"slot": 0.0, "gpu": 0.0, "all": 0.0}
    for row in rows:
        data = read_json_object(root / row.run_dir / PROVENANCE) if row.run_dir else {}
        gpu = float(data.get("gpu_seconds") or 0.0)
        seconds["all"] += gpu
        if row.status.is_experiment:
            seconds["gpu"] += gpu
            seconds["slot"] += float(data.get("held_s") or 0.0)
    best = read_best(paths).get(lane_id)
    base = runs.read_baseline(paths.baseline(lane_id) / runs.BASELINE_RECORD) if lane_id else None
    speedup = None
    if best and base and best.measurements.median_ms:
        speedup = base.timing.median_ms / best.measurements.median_ms
    return SessionUsage(entry.tag, entry.worktree, entry.slot, lane_id, busy,
                        sum(r.status.is_experiment for r in rows), sum(r.status is Status.KEEP for r in rows),
                        seconds["slot"], seconds["gpu"], seconds["all"], speedup, best.commit if best else "")


def busy_slots(record: FleetRecord, usages: list[SessionUsage]) -> dict[str, str]:
    """Each slot: the judging in flight on it, or "" when idle."""
    return {slot: next((f"{u.tag}: {u.busy}" for u in usages if u.slot == slot and u.busy), "")
            for slot in record.slots}


def fleet_best(usages: list[SessionUsage]) -> dict[str, SessionUsage]:
    """Per lane, the session whose best is the most times faster than its own baseline."""
    out: dict[str, SessionUsage] = {}
    for u in usages:
        if u.speedup is not None and (u.lane_id not in out or u.speedup > (out[u.lane_id].speedup or 0.0)):
            out[u.lane_id] = u
    return out


def nearest(idea: str, sessions: list[FleetSession], limit: int = 5) -> list[Nearest]:
    """The experiments whose descriptions are nearest to `idea`, across every session of the fleet."""
    rows = [(s.tag, r) for s in sessions for r in _rows(StatePaths(Path(s.worktree))) if r.status.is_experiment]
    found = process.extract(idea, [r.description for _, r in rows], scorer=fuzz.token_set_ratio, limit=limit)
    return [Nearest(score, rows[i][0], rows[i][1]) for _, score, i in found]
