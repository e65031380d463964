"""live.json: what a running experiment (or re-validation) is doing now, for `dit-ar watch` in another terminal.

One small typed record, rewritten atomically (write to a temporary file, rename) at each phase and after every
timed round and segment, so a reader never sees half a file and never needs a lock. It names the process that
writes it: a reader that finds the phase unfinished and the process gone knows the run ended without a verdict
(a crash, a kill, Ctrl-C)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .files import write_json_atomic

PHASES = ("starting", "quality", "timing", "judging", "done")


@dataclass(frozen=True)
class LiveState:
    run_id: str
    kind: str  # "experiment" | "revalidate"
    commit: str
    description: str
    lane: str
    pid: int
    started: float  # epoch seconds
    updated: float
    phase: str = "starting"
    segment: int = 0  # segments finished
    max_segments: int = 0
    rounds_done: int = 0  # in the current segment
    rounds_per_segment: int = 0
    estimate_pct: float | None = None
    lower_pct: float | None = None
    upper_pct: float | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    verdict: str = ""  # the verdict word once done

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LiveState:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @property
    def finished(self) -> bool:
        return self.phase == "done"

    def writer_alive(self) -> bool:
        """Whether the process that writes this file still runs (on this machine)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def read_live(path: Path) -> LiveState | None:
    """The last state written, None when there is none or it cannot be read (never raises)."""
    try:
        return LiveState.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


class LiveFile:
    """The writer: every update replaces the file; a failing write never stops the run it reports on."""

    def __init__(self, path: Path, state: LiveState, seconds: Callable[[], dict[str, float]] | None = None):
        self.path, self.state, self._seconds = path, state, seconds
        self._write()

    @classmethod
    def start(cls, path: Path, kind: str, run_id: str, commit: str, description: str, lane: str,
              seconds: Callable[[], dict[str, float]] | None = None) -> LiveFile:
        t = time.time()
        return cls(path, LiveState(run_id, kind, commit, description, lane, os.getpid(), t, t), seconds)

    def update(self, **changes: Any) -> None:
        seconds = self._seconds() if self._seconds else self.state.seconds
        self.state = dataclasses.replace(self.state, updated=time.time(), seconds=dict(seconds), **changes)
        self._write()

    def phase(self, name: str) -> None:
        self.update(phase=name)

    def on_round(self, segment: int, done_in_segment: int, rounds: int) -> None:
        self.update(phase="timing", segment=segment, rounds_done=done_in_segment, rounds_per_segment=rounds)

    def on_look(self, look: Any) -> None:
        self.update(segment=look.segments, rounds_done=0, estimate_pct=look.estimate_pct, lower_pct=look.lower_pct,
                    upper_pct=look.upper_pct)

    def finish(self, verdict: str) -> None:
        self.update(phase="done", verdict=verdict)

    def _write(self) -> None:
        try:
            write_json_atomic(self.path, self.state.as_dict())
        except OSError:
            pass


class Tee:
    """Timing callbacks sent to two listeners (the terminal's progress bar and the live file)."""

    def __init__(self, *listeners: Any):
        self.listeners = [x for x in listeners if x is not None]

    def on_round(self, segment: int, done_in_segment: int, rounds: int) -> None:
        for x in self.listeners:
            x.on_round(segment, done_in_segment, rounds)

    def on_look(self, look: Any) -> None:
        for x in self.listeners:
            x.on_look(look)
