"""roles.json: the side-blind A/A checks of each lane's best, and a best found role-dependent (typed records).

A best is *role-dependent* when its tree, timed against itself, runs significantly faster in the candidate's role
than in the best's (or the other way round) in two A/As of fresh pairs (loop/speed/role_check.py): it behaves
differently when it is the best, so every comparison against it is void. While a lane's best is marked, every
experiment is refused (loop/guards/checks.py) with a line that names the keep that introduced it and the command
that moves the best back (`dit-ar recover --before COMMIT`, which records the rewind here and clears the mark).

Per lane id: `checks` (every A/A: its run, the commit, why it ran, the estimate, the verdict), `finding` (the
current mark or null) and `rewinds` (each move back). Written atomically; an experiment holds the session lock.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dit_ar_contract.errors import Refused

from .files import fields_from, read_json_object, write_json_atomic
from .paths import StatePaths

ROLES_FILE = "roles.json"


def roles_path(paths: StatePaths) -> Path:
    return paths.dir / ROLES_FILE


@dataclass(frozen=True)
class RoleCheck:
    """One side-blind A/A of a best: its tree in the candidate's role against itself in the best's role, in fresh
    worker pairs timed as an experiment times them. `estimate_pct` > 0: faster in the candidate's role."""

    run_id: str
    commit: str
    why: str
    checked: str
    estimate_pct: float | None = None
    lower_pct: float | None = None
    upper_pct: float | None = None
    segments: int = 0
    attempts: int = 1  # 2 when a first difference was timed again in fresh pairs
    role_dependent: bool = False

    def line(self) -> str:
        """The summary's line."""
        if self.estimate_pct is None:
            measured = "nothing measured"
        else:
            measured = (f"{self.estimate_pct:+.2f}% [{self.lower_pct:+.2f}%, {self.upper_pct:+.2f}%] in the "
                        f"candidate's role against the best's ({self.segments} segments, {self.attempts} A/A)")
        found = "ROLE-DEPENDENT" if self.role_dependent else "no role difference found"
        return f"side-blind A/A of the best {self.commit[:10]} ({self.why}): {measured}: {found}"


@dataclass(frozen=True)
class RoleFinding:
    """A best found role-dependent: the check, the keep that introduced it (the first keep since the last best
    that passed a check, or since the baseline) and the best to move back to (the one before that keep)."""

    check: RoleCheck
    introduced_by: str
    introduced_run: str
    back_to: str

    def way_back(self) -> str:
        return f"dit-ar recover --before {self.introduced_by[:10]}"

    def way_out(self) -> str:
        """The command that leaves a role-dependent best behind."""
        if not self.back_to:
            return "start a new session from another commit: `dit-ar init --tag NEW --new-baseline`"
        return f"`{self.way_back()}` (then `dit-ar status`)"

    def refusal(self) -> str:
        c = self.check
        if not self.back_to:
            return (f"the best {c.commit[:10]} is role-dependent (run {c.run_id}: {c.estimate_pct:+.2f}% in the "
                    "candidate's role against the best's, in two A/As of fresh pairs) and it is the lane's baseline: "
                    "no experiment is kept on it; start a new session from another commit (`dit-ar init --tag NEW "
                    "--new-baseline`)")
        return (f"the best {c.commit[:10]} is role-dependent: timed against itself side-blind (run {c.run_id}), its "
                f"speed in the candidate's role differed from the best's by {c.estimate_pct:+.2f}% (+: faster as the "
                f"candidate) in two A/As of fresh pairs; it was introduced by the keep of {self.introduced_by[:10]} "
                f"(run {self.introduced_run}), and no experiment is kept on it. Way back: `{self.way_back()}` moves "
                f"the best and the branch back to {self.back_to[:10]} (the commits after it stay in `git reflog`)")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoleFinding:
        return cls(fields_from(RoleCheck, data["check"]), str(data["introduced_by"]), str(data["introduced_run"]),
                   str(data["back_to"]))


@dataclass(frozen=True)
class Rewind:
    """One move of the best back past a role-dependent keep (`dit-ar recover --before`)."""

    before: str  # the keep moved back past
    best_was: str
    best_now: str
    when: str


@dataclass(frozen=True)
class LaneRoles:
    lane_id: str
    checks: tuple[RoleCheck, ...] = ()
    finding: RoleFinding | None = None
    rewinds: tuple[Rewind, ...] = ()

    def passed(self, commit: str) -> bool:
        """Whether an A/A of `commit` found no role difference."""
        return any(c.commit == commit and not c.role_dependent for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"checks": [dataclasses.asdict(c) for c in self.checks],
                "finding": self.finding.as_dict() if self.finding else None,
                "rewinds": [dataclasses.asdict(r) for r in self.rewinds]}

    @classmethod
    def from_dict(cls, lane_id: str, data: dict[str, Any]) -> LaneRoles:
        finding = data.get("finding")
        return cls(lane_id, tuple(fields_from(RoleCheck, c) for c in data.get("checks") or ()),
                   RoleFinding.from_dict(finding) if isinstance(finding, dict) else None,
                   tuple(fields_from(Rewind, r) for r in data.get("rewinds") or ()))


def read_roles(paths: StatePaths, lane_id: str) -> LaneRoles:
    """The lane's role checks (none yet: empty). An entry that does not read is a refusal, never silence: it may
    hold a mark."""
    entry = read_json_object(roles_path(paths)).get(lane_id)
    if entry is None:
        return LaneRoles(lane_id)
    try:
        return LaneRoles.from_dict(lane_id, entry)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise Refused(f"{roles_path(paths)}: the entry of lane {lane_id} does not read ({exc}); it records whether "
                      "the best is role-dependent: restore it from a backup, or delete the entry to drop its "
                      "record") from None


def write_roles(paths: StatePaths, roles: LaneRoles) -> None:
    data = read_json_object(roles_path(paths))
    data[roles.lane_id] = roles.as_dict()
    write_json_atomic(roles_path(paths), data)


def record_check(paths: StatePaths, lane_id: str, check: RoleCheck, finding: RoleFinding | None = None) -> LaneRoles:
    """Add one check (and the mark it sets, if any)."""
    roles = read_roles(paths, lane_id)
    roles = dataclasses.replace(roles, checks=roles.checks + (check,), finding=finding or roles.finding)
    write_roles(paths, roles)
    return roles


def record_rewind(paths: StatePaths, lane_id: str, rewind: Rewind) -> LaneRoles:
    """Record a move back and clear the mark."""
    roles = read_roles(paths, lane_id)
    roles = dataclasses.replace(roles, finding=None, rewinds=roles.rewinds + (rewind,))
    write_roles(paths, roles)
    return roles


def refuse_if_marked(paths: StatePaths, lane_id: str) -> None:
    """Refuse while the lane's best is marked role-dependent (the refusal names the keep and the way back)."""
    finding = read_roles(paths, lane_id).finding
    if finding is not None:
        raise Refused(finding.refusal(), way_out=finding.way_out())
