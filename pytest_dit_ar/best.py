"""The current best commit of a lane: best.json, a git ref per lane and the best worktree."""

from __future__ import annotations

import time
from typing import Any

import git

from . import gitops
from .context import Context
from .state import read_json, write_json_atomic


def record_best(ctx: Context, repo: git.Repo, commit: str, run_id: str, measurements: dict[str, Any],
                effective_class: str = "exact") -> None:
    """Make `commit` the lane's best: ref first (recoverable), then best.json, then the worktree."""
    tag = ctx.session["tag"]
    gitops.set_ref(repo, gitops.best_ref(tag, ctx.lane_id), commit)
    data = read_json(ctx.paths.best, {}) or {}
    history = (data.get(ctx.lane_id) or {}).get("history", [])
    data[ctx.lane_id] = {
        "commit": commit, "tag": tag, "branch": gitops.branch_name(tag), "run_id": run_id,
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "measurements": measurements,
        "effective_class": effective_class,  # against the original baseline, inherited by later candidates
        "ref": gitops.best_ref(tag, ctx.lane_id), "history": history + [commit],
    }
    write_json_atomic(ctx.paths.best, data)
    gitops.sync_worktree(repo, ctx.paths.best_worktree, commit)


def best_commit(ctx: Context) -> str:
    best = ctx.best()
    if not best:
        from .errors import Refused

        raise Refused(f"no best commit for lane {ctx.lane_id}: run `dit-ar baseline` first")
    return best["commit"]
