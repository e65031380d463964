"""The state directory .autoresearch/ (DESIGN §4): paths and crash-safe JSON files."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATE_DIR = ".autoresearch"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON through a temp file in the same folder, fsync, then rename over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True, default=str)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_json(path: Path, default: Any = None) -> Any:
    if not path.is_file():
        return default
    return json.loads(path.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class StatePaths:
    """Every path under .autoresearch/ in one place."""

    root: Path

    @property
    def dir(self) -> Path:
        return self.root / STATE_DIR

    @property
    def session(self) -> Path:
        return self.dir / "session.json"

    @property
    def integrity(self) -> Path:
        return self.dir / "integrity.json"

    @property
    def best(self) -> Path:
        return self.dir / "best.json"

    @property
    def ledger(self) -> Path:
        return self.dir / "results.tsv"

    @property
    def lock(self) -> Path:
        return self.dir / "lock"

    @property
    def runs(self) -> Path:
        return self.dir / "runs"

    @property
    def best_worktree(self) -> Path:
        return self.dir / "worktrees" / "best"

    @property
    def handbook_index(self) -> Path:
        return self.dir / "handbook_index.json"

    def baseline(self, lane_id: str) -> Path:
        return self.dir / "baseline" / lane_id

    def run(self, run_id: str) -> Path:
        return self.runs / run_id


def session_lane(root: Path) -> str | None:
    """The lane named in the project's session.json, if a session was started."""
    return (read_json(StatePaths(root).session, {}) or {}).get("lane")
