"""A session's replica on a judge's node: what the driver packs for it, and its own git repository and state
folder there, where the judge runs (what comes back: archive.py).

The driver sends a git bundle of the session's branch, best ref and baseline ref (the baseline folder travels in
git too: `state.backup` keeps it under the baseline ref) and the small state files a judging reads (`pack`), never
a Ray `working_dir` (size-capped, and it leaves out `.git`, `.autoresearch/` and whatever `.gitignore` names).

One replica per (node, fleet, session), kept between judgings so compile caches and worktrees are reused. Each
judging brings it to the session's refs from the driver's bundle, checks out the session's HEAD as a clean tree,
replaces the state files with the driver's and restores the baseline folder from the baseline ref (checked
against session.json's manifest hash by the judging itself). Nothing here runs candidate code.

The base folder is `DIT_AR_REPLICAS`, else /var/tmp/dit-ar/replicas (node-local disk; not the Ray session's
temporary folder, which a restart of Ray removes).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import git

from ..state import backup, gitops
from ..state.paths import STATE_DIR, StatePaths
from ..state.session import Session
from .request import ReplicaPayload

BASE_VARIABLE = "DIT_AR_REPLICAS"
DEFAULT_BASE = Path("/var/tmp/dit-ar/replicas")
RUN_STATE = ("HALT", "live.json", "dispatch.json")  # a replica's leftovers from its last judging
INCOMING = "refs/dit-ar/incoming/"
STATE_FILES = ("session.json", "integrity.json", "best.json", "noise.json", "results.tsv")


def base_folder() -> Path:
    return Path(os.environ.get(BASE_VARIABLE) or DEFAULT_BASE)


def replica_path(node_id: str, fleet: str, tag: str) -> Path:
    """Where the session `tag` of `fleet` is replicated on node `node_id`."""
    part = [re.sub(r"[^A-Za-z0-9._-]+", "-", p) or "x" for p in (node_id[:16], fleet, tag)]
    return base_folder().joinpath(*part)


def build(root: Path, payload: ReplicaPayload, tag: str, lane_id: str) -> Path:
    """Bring the replica at `root` to the payload: refs, a clean checkout of its HEAD, the state, the baseline."""
    root.mkdir(parents=True, exist_ok=True)
    if not (root / ".git").is_dir():
        git.Repo.init(root)
    repo = gitops.open_repo(root)
    gitops.exclude_state_dir(repo)
    with tempfile.NamedTemporaryFile(prefix="dit-ar-", suffix=".bundle", dir=root / ".git") as fh:
        fh.write(payload.bundle)
        fh.flush()  # fetched beside the refs (git refuses to fetch into the checked-out branch)
        repo.git.fetch("--quiet", "--force", "--no-tags", fh.name, *(f"+{ref}:{INCOMING}{ref}" for ref in payload.refs))
    repo.git.checkout("--quiet", "--force", "-B", payload.branch, payload.head)
    repo.git.reset("--quiet", "--hard", payload.head)
    repo.git.clean("-ffdxq", "-e", f"/{STATE_DIR}/")
    for ref, sha in payload.refs.items():
        if not ref.startswith("refs/heads/"):
            repo.git.update_ref(ref, sha)
    _state(StatePaths(root), payload, repo, gitops.baseline_ref(tag, lane_id), lane_id)
    return root


def _state(paths: StatePaths, payload: ReplicaPayload, repo: git.Repo, baseline_ref: str, lane_id: str) -> None:
    """The driver's state files in place of the replica's, its run leftovers removed, the baseline restored."""
    paths.dir.mkdir(parents=True, exist_ok=True)
    for name in STATE_FILES + RUN_STATE:
        (paths.dir / name).unlink(missing_ok=True)
    for name, data in payload.state.items():
        if name in STATE_FILES:
            (paths.dir / name).write_bytes(data)
    folder = paths.baseline(lane_id)
    shutil.rmtree(folder, ignore_errors=True)
    if baseline_ref in payload.refs:
        backup.restore_baseline(repo, folder, payload.refs[baseline_ref])


# -- the driver's side: the payload of one judging --------------------------------------------------------
def session_refs(session: Session, repo: git.Repo) -> dict[str, str]:
    """The refs a judging needs, as the session has them: its branch, its best and its baseline copy."""
    record = session.started
    refs = {f"refs/heads/{record.branch}": gitops.head_sha(repo)}
    for ref in (gitops.best_ref(record.tag, session.lane_id), gitops.baseline_ref(record.tag, session.lane_id)):
        sha = gitops.read_ref(repo, ref)
        if sha:
            refs[ref] = sha
    return refs


def pack(session: Session, repo: git.Repo) -> ReplicaPayload:
    """The payload of one judging of the session at its HEAD."""
    refs = session_refs(session, repo)
    with tempfile.TemporaryDirectory(prefix="dit-ar-bundle-") as tmp:
        path = Path(tmp) / "session.bundle"
        repo.git.bundle("create", str(path), *refs)
        bundle = path.read_bytes()
    state = {name: (session.paths.dir / name).read_bytes() for name in STATE_FILES
             if (session.paths.dir / name).is_file()}
    record = session.started
    return ReplicaPayload(bundle, record.branch, gitops.head_sha(repo), refs, state)
