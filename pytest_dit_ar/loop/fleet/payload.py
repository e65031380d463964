"""A session's git and state packed for its replica on a judge's node, and a judge's files unpacked on return.

The driver sends a git bundle of the session's branch, best ref and baseline ref (the baseline folder travels in
git too: `state.backup` keeps it under the baseline ref) and the small state files a judging reads. What comes
back is a tar archive of the run folder (and, for a baseline or a calibration, the files recorded beside it);
`unpack` extracts only regular files, only under the paths the kind of judging may return.
"""

from __future__ import annotations

import io
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

import git

from dit_ar_contract.errors import Refused

from ...state import gitops
from ...state.paths import STATE_DIR, StatePaths
from ...state.session import Session
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


def archive(root: Path, members: list[str]) -> bytes:
    """A tar archive of `members` (paths relative to `root`; folders whole; missing ones left out)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for member in members:
            if (root / member).exists():
                tar.add(root / member, arcname=member)
    return buffer.getvalue()


def allowed_members(paths: StatePaths, kind: str, run_id: str, lane_id: str) -> tuple[str, ...]:
    """What a judging of `kind` may write into the session (relative to the project root)."""
    state = PurePosixPath(STATE_DIR)
    allowed = [str(state / "runs" / run_id)]
    if kind == "baseline":
        allowed.append(str(state / "baseline" / lane_id))
    if kind == "calibration":
        allowed += [str(state / f"calibration-{lane_id}{ext}") for ext in (".json", ".png", ".profile.json")]
    return tuple(allowed)


def unpack(data: bytes, root: Path, allowed: tuple[str, ...]) -> list[str]:
    """Extract the archive's regular files under `root`, each inside one of the `allowed` paths; refuse anything
    else (a link, a device, a path outside them). Returns the files written."""
    written = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            name = PurePosixPath(member.name)
            inside = any(name == PurePosixPath(a) or PurePosixPath(a) in name.parents for a in allowed)
            if ".." in name.parts or name.is_absolute() or not inside:
                raise Refused(f"a judge's archive holds {member.name!r}, outside what it may return {list(allowed)}")
            if member.isdir():
                continue
            if not member.isfile():
                raise Refused(f"a judge's archive holds {member.name!r}, not a regular file")
            tar.extract(member, root, filter="data")
            written.append(member.name)
    return written
