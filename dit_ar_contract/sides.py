"""Candidate and best, the two sides of every A/B measurement: `Role` names a side, `Sides[T]` holds one value per
side (typed, in place of a `{"cand": ..., "best": ...}` dictionary read by string key).

A side has two spellings, each defined here once: its key in the records (`Role.key`: "cand" or "best", as
perf.json and the study files write it) and its name on workers, logs and screens (`Role.label`: "candidate" or
"best"). `Sides.to_dict` / `Sides.from_dict` write and read the records' dictionary shape, so files keep it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
U = TypeVar("U")


class Role(enum.Enum):
    """One side of a measurement: the candidate (the commit under test) or the best (the tree it must beat)."""

    CANDIDATE = "cand"
    BEST = "best"

    @property
    def key(self) -> str:
        """The side's key in the records ("cand" or "best")."""
        return self.value

    @property
    def label(self) -> str:
        """The side's name on its workers, logs and screens ("candidate" or "best")."""
        return "candidate" if self is Role.CANDIDATE else "best"

    @property
    def other(self) -> Role:
        return Role.BEST if self is Role.CANDIDATE else Role.CANDIDATE

    @classmethod
    def from_key(cls, key: str) -> Role:
        """The role of a record key ("cand"/"best") or a label ("candidate"/"best")."""
        for role in cls:
            if key in (role.key, role.label):
                return role
        raise ValueError(f"no side is called {key!r}: use 'cand' (or 'candidate') or 'best'")


ROLES = (Role.CANDIDATE, Role.BEST)


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Sides(Generic[T]):
    """One value for each side."""

    candidate: T
    best: T

    @classmethod
    def of(cls, make: Callable[[Role], T]) -> Sides[T]:
        """Both sides from one function of the role (called once per side: each gets its own list or dict)."""
        return cls(make(Role.CANDIDATE), make(Role.BEST))

    def __getitem__(self, role: Role) -> T:
        return self.candidate if role is Role.CANDIDATE else self.best

    def items(self) -> tuple[tuple[Role, T], tuple[Role, T]]:
        return (Role.CANDIDATE, self.candidate), (Role.BEST, self.best)

    def values(self) -> tuple[T, T]:
        return self.candidate, self.best

    def map(self, fn: Callable[[T], U]) -> Sides[U]:
        return Sides(fn(self.candidate), fn(self.best))

    def replace(self, role: Role, value: T) -> Sides[T]:
        return Sides(value, self.best) if role is Role.CANDIDATE else Sides(self.candidate, value)

    def to_dict(self, fn: Callable[[T], Any] = _same, skip_none: bool = False) -> dict[str, Any]:
        """The records' shape: `{"cand": fn(candidate), "best": fn(best)}` (sides whose value is None left out
        with `skip_none`)."""
        return {role.key: fn(value) for role, value in self.items() if not (skip_none and value is None)}

    @classmethod
    def from_dict(cls, data: Any, fn: Callable[[Any], T] = _same, default: Any = None) -> Sides[T]:
        """A record's `{"cand": ..., "best": ...}`: a side it lacks (or all, when `data` is no mapping) reads as
        `default`, then each value goes through `fn` (`list` gives each side a list of its own)."""
        found = data if isinstance(data, Mapping) else {}
        return cls.of(lambda role: fn(found.get(role.key, default)))
