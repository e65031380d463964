"""The fleets of a repository: each fleet's lane, cluster, slots and sessions (`dit-ar fleet up` writes one).

One file a fleet, `<git common dir>/dit-ar-fleet/fleet-<prefix>.json`, shared by every worktree; `fleet status`,
`adopt` and `down` read it. A session's own state stays in its worktree (`.autoresearch/`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

from dit_ar_contract.errors import Refused

from ..state.files import read_json_object, write_json_atomic
from .index import common_folder


@dataclass(frozen=True)
class FleetSession:
    tag: str
    worktree: str
    slot: str


@dataclass(frozen=True)
class FleetRecord:
    name: str  # the tag prefix: sessions are NAME-00, NAME-01, ...; slots NAME:slot-0, ...
    lane: str
    address: str
    gpus: int  # per slot
    slots: tuple[str, ...]
    sessions: tuple[FleetSession, ...]
    created: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FleetRecord:
        return cls(str(data["name"]), str(data["lane"]), str(data["address"]), int(data.get("gpus", 0)),
                   tuple(data.get("slots") or ()), tuple(FleetSession(**s) for s in data.get("sessions") or ()),
                   str(data.get("created", "")))

    def session(self, tag: str) -> FleetSession | None:
        return next((s for s in self.sessions if s.tag == tag), None)


def path_of(repo: git.Repo, name: str) -> Path:
    return common_folder(repo) / f"fleet-{name}.json"


def write(repo: git.Repo, record: FleetRecord) -> None:
    write_json_atomic(path_of(repo, record.name), record.as_dict())


def remove(repo: git.Repo, name: str) -> None:
    path_of(repo, name).unlink(missing_ok=True)


def fleets(repo: git.Repo) -> list[FleetRecord]:
    folder = common_folder(repo)
    out = []
    for path in sorted(folder.glob("fleet-*.json")) if folder.is_dir() else []:
        data = read_json_object(path)
        if data:
            out.append(FleetRecord.from_dict(data))
    return out


def one(repo: git.Repo, name: str | None) -> FleetRecord:
    """The fleet named `name`, or the repository's only fleet; refuse naming the choices otherwise."""
    known = fleets(repo)
    if name:
        found = next((f for f in known if f.name == name), None)
        if found is None:
            raise Refused(f"no fleet {name!r} in this repository (known: {[f.name for f in known] or 'none'})")
        return found
    if len(known) != 1:
        raise Refused("name the fleet with --tag-prefix: " + (", ".join(f.name for f in known) if known else
                                                              "this repository has none (`dit-ar fleet up` makes one)"))
    return known[0]


def owner_of(repo: git.Repo, tag: str) -> tuple[FleetRecord, FleetSession] | None:
    for record in fleets(repo):
        session = record.session(tag)
        if session is not None:
            return record, session
    return None
