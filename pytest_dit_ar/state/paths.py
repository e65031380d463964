"""Every path under `.autoresearch/` (docs/design/state-and-recovery.md) in one place, and run ids."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

STATE_DIR = ".autoresearch"


@dataclass(frozen=True)
class StatePaths:
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
    def candidate_worktree(self) -> Path:
        """A clean checkout of the candidate commit: what the candidate's sandbox sees (like the best's)."""
        return self.dir / "worktrees" / "candidate"

    @property
    def compile_cache(self) -> Path:
        """Compile caches, one folder per tree of the mutable paths (worker/compile_cache.py)."""
        return self.dir / "compile-cache"

    @property
    def handbook_index(self) -> Path:
        return self.dir / "handbook_index.json"

    @property
    def report(self) -> Path:
        return self.dir / "report"

    @property
    def live(self) -> Path:
        """The running experiment's progress (phase, segments, estimate), rewritten atomically; `dit-ar watch`
        reads it."""
        return self.dir / "live.json"

    @property
    def origin_worktree(self) -> Path:
        """A clean checkout of the lane's original baseline commit (`dit-ar revalidate` times the best against it)."""
        return self.dir / "worktrees" / "origin"

    @property
    def halt(self) -> Path:
        """Written when a run changed the environment the harness relies on; experiments refuse while it exists."""
        return self.dir / "HALT"

    @property
    def archive(self) -> Path:
        return self.dir / "archive"

    @property
    def baselines(self) -> Path:
        return self.dir / "baseline"

    def baseline(self, lane_id: str) -> Path:
        return self.baselines / lane_id

    def confirmation(self, lane_id: str) -> Path:
        """The lane's best confirmed on fresh seeds against the original baseline (state/confirmation.py)."""
        return self.dir / "confirmation" / f"{lane_id}.json"

    def run(self, run_id: str) -> Path:
        return self.runs / run_id


def new_run_id(label: str) -> str:
    """A sortable, unique folder name: time, a label (a commit's first 8 hex digits) and a counter."""
    return time.strftime("%Y%m%d-%H%M%S") + f"-{label[:8]}-{int(time.time_ns()) % 10000:04d}"


def now() -> str:
    """The one timestamp format of every state file and ledger row."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
