"""`dit-ar init`: create or validate the session branch and write session.json and integrity.json."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import time
from pathlib import Path
from typing import Callable

from dit_ar_contract import device
from dit_ar_contract.config import load_config
from dit_ar_contract.device import LaneTarget
from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status

from ..search.engine import build_index
from ..search.location import find_handbook, user_cache
from ..state import gitops, integrity, ledger
from ..state.executor import ExecutorChoice
from ..state.files import write_json_atomic
from ..state.paths import StatePaths, now
from ..state.session import LAYOUT, SessionRecord, read_record
from .speed import warm_servers


def _archive_previous(paths: StatePaths, old_tag: str) -> Path:
    """Move the previous session's state aside (the ledger and run folders stay where they are)."""
    dest = paths.archive / f"{old_tag}-{time.strftime('%Y%m%d-%H%M%S')}"
    dest.mkdir(parents=True)
    for src in (paths.session, paths.integrity, paths.best, paths.baselines):
        if src.exists():
            shutil.move(str(src), str(dest / src.name))
    return dest


def _index_handbook(root: Path, paths: StatePaths) -> str:
    """Index the handbook `dit-ar search` reads: the project's own, else the copy shipped in the package."""
    handbook = find_handbook(root)
    if handbook is None:
        return "handbook not indexed (no handbook/ folder and no packaged copy)"
    shared = user_cache()
    if not paths.handbook_index.exists() and shared.is_file():  # a fresh clone: start from the user's cache
        paths.handbook_index.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared, paths.handbook_index)
    build_index(handbook, paths.handbook_index)  # checked against the files' hashes; rebuilt when stale
    with contextlib.suppress(OSError):
        shared.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(paths.handbook_index, shared)
    where = "" if handbook == root / "handbook" else f" (the packaged handbook, {handbook})"
    return f"handbook indexed into {paths.handbook_index.relative_to(root)}{where}"


def recorded_origins(paths: StatePaths, lane_id: str) -> list[str]:
    """Commits the lane's baselines were taken at, oldest first (from the ledger, which keeps every session)."""
    rows = ledger.read(paths.ledger) if paths.ledger.exists() else []
    return list(dict.fromkeys(r.commit for r in rows if r.lane == lane_id and r.status is Status.BASELINE))


def check_origin(paths: StatePaths, lane_id: str, head: str, new_baseline: bool) -> str:
    """Quality is judged against the lane's original baseline. A session started anywhere else would make that
    commit the new reference silently: refuse unless `--new-baseline` says so. Returns what the new origin
    replaces ('' when HEAD is a recorded origin or the lane has none)."""
    origins = recorded_origins(paths, lane_id)
    if not origins or head in origins:
        return ""
    if not new_baseline:
        raise Refused(f"HEAD {head[:10]} is not lane {lane_id}'s recorded baseline commit {origins[0][:10]}: a session "
                      f"here would judge quality against this commit instead. Check out {origins[0][:10]} for a "
                      "fresh session of the same origin, or pass --new-baseline to make this commit the new "
                      "reference (recorded in the ledger)")
    return ",".join(o[:12] for o in origins)


def init(config_path: Path, tag: str | None, lane: str | None, out: Callable[[str], None] = print,
         new_baseline: bool = False, target: LaneTarget | None = None,
         executor: ExecutorChoice | None = None) -> int:
    """`target` and `executor`: a fleet session's (fleet/bind.py): its device is its slot's."""
    config = load_config(config_path)
    repo = gitops.open_repo(config.root)
    gitops.exclude_state_dir(repo)
    lane_obj = config.lane(lane)
    target = target or device.resolve_lane(config, lane_obj)
    if not target.runnable:
        raise Refused(f"lane {lane_obj.name!r} cannot run here: {target.problem}")
    tag = tag or time.strftime("%b%d").lower()
    if not gitops.valid_tag(tag):
        raise Refused(f"tag {tag!r} is not usable in a branch name: use letters, digits, '.', '_' or '-'")
    gitops.require_clean(repo)
    gitops.head_sha(repo)
    paths = StatePaths(config.root)
    previous = read_record(paths)
    branch = gitops.branch_name(tag)

    if previous is not None and previous.tag == tag:
        if previous.lane != lane_obj.name:
            raise Refused(f"session {tag} runs lane {previous.lane!r}; use another tag for lane {lane_obj.name!r}")
        if gitops.current_branch(repo) != branch:
            repo.git.checkout(branch)
        out(f"session {tag} exists: branch {branch}, lane {previous.lane} ({previous.lane_id}), "
            f"baseline commit {previous.baseline_commit[:10]}")
        return 0

    exists = branch in [h.name for h in repo.heads]
    head = repo.heads[branch].commit.hexsha if exists else gitops.head_sha(repo)
    replaces = check_origin(paths, target.lane_id, head, new_baseline)  # before anything moves
    stopped = warm_servers.stop(paths)  # a new session's workers never come from an old session's servers
    if stopped:
        out(f"stopped the previous session's warm servers ({stopped})")
    if previous is not None:
        dest = _archive_previous(paths, previous.tag)
        out(f"previous session {previous.tag} moved to {dest.relative_to(config.root)}")
    if exists:
        repo.git.checkout(branch)
    else:
        repo.git.checkout("-b", branch)
    record = SessionRecord(tag=tag, branch=branch, lane=lane_obj.name, lane_id=target.lane_id,
                           device=target.identity, on_target=target.on_target, baseline_commit=head,
                           init_time=now(), config=str(config.path.relative_to(config.root)),
                           config_sha256=config.sha256, layout=LAYOUT, seed_key=secrets.token_hex(16),
                           new_origin_from=replaces, executor=executor or ExecutorChoice())
    write_json_atomic(paths.session, record.as_dict())
    write_json_atomic(paths.integrity, {"config_sha256": config.sha256, "taken_at": head,
                                        "files": integrity.snapshot(config.root, config.fixed_paths)})
    label = "" if target.on_target else (f" (foreign lane: {target.identity.name}, never compared with "
                                         f"{config.target.name} results)")
    out(f"session {tag}: branch {branch} at {head[:10]}, lane {target.lane_id}{label}")
    if replaces:
        out(f"new baseline origin for lane {target.lane_id} (was {replaces}); the baseline's ledger row says so")
    out(_index_handbook(config.root, paths))
    out(f"next: dit-ar --config {config_path} baseline")
    return 0
