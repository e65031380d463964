"""The judging a session has in flight, on disk (`.autoresearch/dispatch.json`, written atomically and fsynced).

The driver writes it before it creates the judge (phase `prepare`) and again, before it lets the candidate's code
start, with phase `run`: a judge lost after that line is the candidate's CRASH (`node-lost`), never retried; one
lost before it is retried once. A driver killed mid-judging leaves the record; the session's next `status` or
`experiment` re-attaches to the judge it names and records the result once (driver.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..state.files import read_json_object, write_json_atomic
from ..state.paths import StatePaths

PREPARE, RUN = "prepare", "run"


@dataclass(frozen=True)
class Dispatch:
    kind: str
    run_id: str
    actor: str  # the judge's name in the fleet's namespace
    slot: str
    attempt: int
    phase: str
    started: float
    commit: str = ""
    parent: str = ""
    declared_class: str = ""
    description: str = ""
    flags: str = ""  # the run's flags as the judge would record them (e.g. unsandboxed)
    node: str = ""
    host: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Dispatch:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def moved(self, **changes: Any) -> Dispatch:
        return dataclasses.replace(self, **changes)


def path(paths: StatePaths) -> Path:
    return paths.dir / "dispatch.json"


def read(paths: StatePaths) -> Dispatch | None:
    data = read_json_object(path(paths))
    return Dispatch.from_dict(data) if data else None


def write(paths: StatePaths, dispatch: Dispatch) -> None:
    write_json_atomic(path(paths), dispatch.as_dict())


def clear(paths: StatePaths) -> None:
    path(paths).unlink(missing_ok=True)
