"""A session's git and state packed for its replica on a judge's node (what comes back: archive.py).

The driver sends a git bundle of the session's branch, best ref and baseline ref (the baseline folder travels in
git too: `state.backup` keeps it under the baseline ref) and the small state files a judging reads, never a Ray
`working_dir` (size-capped, and it leaves out `.git`, `.autoresearch/` and whatever `.gitignore` names).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import git

from ..state import gitops
from ..state.session import Session
from .request import ReplicaPayload

STATE_FILES = ("session.json", "integrity.json", "best.json", "noise.json", "results.tsv")


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
