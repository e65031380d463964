"""A judge's files, packed in the replica and unpacked into the session: a tar archive of the run folder (and, for a
baseline or a calibration, the files recorded beside it). `unpack` extracts only regular files, only under the
paths the kind of judging may return.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path, PurePosixPath

from dit_ar_contract.errors import Refused

from ..state.paths import STATE_DIR, StatePaths


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
