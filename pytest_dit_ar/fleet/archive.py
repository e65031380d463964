"""A judge's files, packed in the replica and unpacked into the session: a tar archive of the run folder (and, for a
baseline or a calibration, the files recorded beside it). `unpack` extracts only regular files, only under the
paths the kind of judging may return.

Both ends are bounded, because the control node holds every session's ledger and the fleet's index: the judge
packs into a file in its replica (never the whole archive in memory) and refuses to pack more than
`MAX_UNPACKED_BYTES` or `MAX_MEMBERS`; the driver fetches the parts into a file beside the session's state and
checks the members' sizes and count against the same caps before it writes anything. What the candidate puts in its
run folder is bounded: its outputs as the harness checked them (the lane's corpus at the lane's size) and its
workers' logs, capped per worker; so a run folder over the caps is the harness's own failure: a refusal naming the
cap, nothing recorded, HEAD kept (docs/design/scale.md).
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from dit_ar_contract.errors import Refused

from ..state.paths import STATE_DIR, StatePaths

MAX_UNPACKED_BYTES = 2 << 30  # a judging's files, unpacked (a judged embedded-lane run folder: about 350 KiB)
MAX_MEMBERS = 20_000  # files and folders in one judging's archive (that run folder: 53 files)
FETCH_CHUNK_BYTES = 32 << 20  # the part of an archive fetched at a time (well under a laptop's Ray object store)


def tree_size(root: Path, members: list[str]) -> tuple[int, int]:
    """(bytes, entries) of `members` (paths relative to `root`, folders whole; links counted, not followed);
    counting stops once past either cap."""
    size = count = 0
    for member in members:
        top = root / member
        if not (top.exists() or top.is_symlink()):
            continue
        for path in (top, *(top.rglob("*") if top.is_dir() and not top.is_symlink() else ())):
            count += 1
            size += path.lstat().st_size if path.is_file() and not path.is_symlink() else 0
            if over_caps(size, count):
                return size, count
    return size, count


def over_caps(size: int, count: int) -> str:
    """Why `size` bytes in `count` members may not come back ("" when within the caps)."""
    if size > MAX_UNPACKED_BYTES:
        return (f"{size / 2**20:.0f} MiB unpacked, over the cap of {MAX_UNPACKED_BYTES >> 20} MiB "
                "(archive.MAX_UNPACKED_BYTES)")
    if count > MAX_MEMBERS:
        return f"{count} files and folders, over the cap of {MAX_MEMBERS} (archive.MAX_MEMBERS)"
    return ""


def archive(root: Path, members: list[str], out: Path) -> int:
    """Write a tar archive of `members` (paths relative to `root`; folders whole; missing ones left out) to `out`;
    its size in bytes. Refused (nothing written) when they are over the caps."""
    problem = over_caps(*tree_size(root, members))
    if problem:
        raise Refused(f"the judge's files ({', '.join(members)}) are {problem}: not packed; they stay in the "
                      f"node's replica at {root}")
    with tarfile.open(out, mode="w:gz", compresslevel=1) as tar:
        for member in members:
            if (root / member).exists():
                tar.add(root / member, arcname=member)
    return out.stat().st_size


def allowed_members(paths: StatePaths, kind: str, run_id: str, lane_id: str) -> tuple[str, ...]:
    """What a judging of `kind` may write into the session (relative to the project root)."""
    state = PurePosixPath(STATE_DIR)
    allowed = [str(state / "runs" / run_id)]
    if kind == "baseline":
        allowed.append(str(state / "baseline" / lane_id))
    if kind == "calibration":
        allowed += [str(state / f"calibration-{lane_id}{ext}") for ext in (".json", ".png", ".profile.json")]
    return tuple(allowed)


@contextmanager
def spooled(folder: Path, fetch: Callable[[int], bytes], size: int) -> Iterator[Path]:
    """The archive of `size` bytes fetched part by part (`fetch(index)`) into a temporary file in `folder`,
    removed afterwards. A size over the unpacked cap is refused before anything is fetched (gzip never makes a
    file larger than a few bytes over what it holds)."""
    if size > MAX_UNPACKED_BYTES:
        raise Refused(f"the judge's archive is {size / 2**20:.0f} MiB, over the cap of {MAX_UNPACKED_BYTES >> 20} MiB "
                      "(archive.MAX_UNPACKED_BYTES): not fetched")
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="judge-", suffix=".tar.gz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            for index in range((size + FETCH_CHUNK_BYTES - 1) // FETCH_CHUNK_BYTES):
                fh.write(fetch(index))
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)


def _check(tar: tarfile.TarFile, allowed: tuple[str, ...]) -> list[tarfile.TarInfo]:
    """Every member, read before anything is written: inside `allowed`, a regular file or a folder, and within the
    caps altogether."""
    members, size = [], 0
    for member in tar:
        name = PurePosixPath(member.name)
        inside = any(name == PurePosixPath(a) or PurePosixPath(a) in name.parents for a in allowed)
        if ".." in name.parts or name.is_absolute() or not inside:
            raise Refused(f"a judge's archive holds {member.name!r}, outside what it may return {list(allowed)}")
        if not (member.isdir() or member.isfile()):
            raise Refused(f"a judge's archive holds {member.name!r}, not a regular file")
        members.append(member)
        size += member.size if member.isfile() else 0
        problem = over_caps(size, len(members))
        if problem:
            raise Refused(f"a judge's archive holds {problem}: nothing of it was written")
    return members


def unpack(path: Path, root: Path, allowed: tuple[str, ...]) -> list[str]:
    """Extract the archive at `path` (its regular files) under `root`, each inside one of the `allowed` paths;
    refuse anything else (a link, a device, a path outside them, more than the caps) before writing anything.
    Returns the files written."""
    with tarfile.open(path, mode="r:gz") as tar:
        members = _check(tar, allowed)
        for member in members:
            if member.isfile():
                tar.extract(member, root, filter="data")
    return [m.name for m in members if m.isfile()]
