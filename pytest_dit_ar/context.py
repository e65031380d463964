"""The loaded session: config, repo, state paths, session.json and the pinned lane."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import hardware, integrity
from .config import Config, Lane, load_config
from .errors import Refused
from .hardware import LaneTarget
from .state import StatePaths, read_json


@dataclass
class Context:
    config: Config
    lane: Lane
    target: LaneTarget
    paths: StatePaths
    session: dict[str, Any] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.config.root

    @property
    def lane_id(self) -> str:
        return self.target.lane_id

    @property
    def baseline_dir(self) -> Path:
        return self.paths.baseline(self.lane_id)

    @property
    def threads(self) -> int:
        return int(self.lane.performance["threads"])

    def best(self) -> dict[str, Any] | None:
        return (read_json(self.paths.best, {}) or {}).get(self.lane_id)


def load_context(config_path: str | Path, lane: str | None = None, need_session: bool = True) -> Context:
    """Load config and session; the lane is the session's unless given; refuse when it cannot run here."""
    config = load_config(config_path)
    paths = StatePaths(config.root)
    session = read_json(paths.session, {}) or {}
    if need_session and not session:
        raise Refused(f"no session in {paths.dir}: run `dit-ar --config {config_path} init --tag T` first")
    lane_name = lane or session.get("lane") or config.default_lane
    if need_session and lane and session and lane != session.get("lane"):
        raise Refused(f"the session (tag {session.get('tag')}) runs lane {session.get('lane')!r}, not {lane!r}; "
                      f"start a new session with `dit-ar init --tag T --lane {lane}`")
    lane_obj = config.lane(lane_name)
    target = hardware.resolve_lane(config, lane_obj)
    if not target.runnable:
        raise Refused(f"lane {lane_name!r} cannot run here: {target.problem}")
    return Context(config, lane_obj, target, paths, session)


def verify_session_integrity(ctx: Context) -> list[str]:
    """Fixed files and the config against integrity.json; returns the differences (empty when intact)."""
    recorded = read_json(ctx.paths.integrity)
    if not recorded:
        raise Refused(f"{ctx.paths.integrity} is missing: run `dit-ar init` again")
    problems = integrity.diff(recorded["files"], integrity.snapshot(ctx.root, ctx.config.fixed_paths))
    if recorded.get("config_sha256") != ctx.config.sha256:
        problems.append(f"changed: {ctx.config.path.relative_to(ctx.root)} (config)")
    return problems


def verify_baseline(ctx: Context) -> dict[str, Any]:
    """Check the baseline artifacts against their manifest (and the manifest against session.json)."""
    folder = ctx.baseline_dir
    manifest = read_json(folder / integrity.MANIFEST)
    if not manifest:
        raise Refused(f"no baseline for lane {ctx.lane_id} in {folder}: run `dit-ar baseline` first")
    recorded = ctx.session.get("baselines", {}).get(ctx.lane_id, {}).get("manifest_sha256")
    if recorded and recorded != integrity.sha256_file(folder / integrity.MANIFEST):
        raise Refused(f"{folder / integrity.MANIFEST} differs from the copy recorded in session.json: "
                      "the baseline was tampered with; start a new session (`dit-ar init --tag NEW`)")
    problems = integrity.diff(manifest["files"], integrity.manifest_of(folder))
    if problems:
        raise Refused(f"the baseline in {folder} does not match its manifest ({'; '.join(problems[:5])}); "
                      "start a new session (`dit-ar init --tag NEW`) and take a new baseline")
    return read_json(folder / "baseline.json")


def metric_value(median_ms: float | None, lane: Lane) -> float | None:
    """A batch latency in ms expressed as the lane's primary metric."""
    if median_ms is None:
        return None
    return lane.batch / (median_ms / 1e3) if lane.primary_metric == "images_per_s" else median_ms


def new_run_id(commit: str) -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{commit[:8]}-{int(time.time_ns()) % 10000:04d}"
