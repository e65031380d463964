"""The outputs a worker writes and the harness reads itself: plain files of bounded size, safetensors it can parse,
images of the shape the request asked for with finite values. Anything else is the candidate's crash."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from dit_ar_contract.errors import CandidateCrash

from . import log_relay

OUTPUT_SLACK_MB = 64  # an output file may exceed its images' float32 size by this much (latents, header)


def read_output(path: Path, limit_bytes: int) -> bytes:
    """The bytes of an output file the worker wrote, refusing anything but a plain file of bounded size: a
    FIFO, a symlink, a device or a folder in its place is the candidate's crash, never a hang or a harness
    error (opened without following links and without blocking, checked again once open)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise CandidateCrash(f"wrote no output at {path.name} ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise CandidateCrash(f"left a {_kind(st.st_mode)} where its output {path.name} belongs")
    if st.st_size > limit_bytes:
        raise CandidateCrash(f"wrote an output of {st.st_size / 2**20:.0f} MiB (at most {limit_bytes / 2**20:.0f} "
                             "MiB fits the request)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise CandidateCrash(f"left an unreadable output {path.name} ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CandidateCrash(f"swapped its output {path.name} for a special file")
        chunks, size = [], 0
        while size <= limit_bytes:
            chunk = os.read(fd, 1 << 22)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit_bytes:
            raise CandidateCrash(f"its output {path.name} grew past {limit_bytes / 2**20:.0f} MiB while read")
        return b"".join(chunks)
    except OSError as exc:
        raise CandidateCrash(f"left an unreadable output {path.name} ({exc.strerror})") from None
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "symlink"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "folder"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def parse_outputs(data: bytes) -> tuple[Any, Any]:
    """images and latents from safetensors bytes; anything malformed is the candidate's crash."""
    from safetensors.torch import load

    try:
        tensors = load(data)
        return tensors["images"].float(), tensors["latents"].float()
    except Exception as exc:  # noqa: BLE001 - whatever the parser raises on bad bytes is the candidate's doing
        raise CandidateCrash(f"wrote outputs the harness cannot read ({type(exc).__name__}: {str(exc)[:200]})") \
            from None


def folder_bytes(root: Path, stop_at: int) -> int:
    """Bytes of the files under `root` (links not followed), counting stops once past `stop_at`."""
    total, todo = 0, [root]
    while todo and total <= stop_at:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(Path(entry.path))
                else:
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
    return total


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def log_tail(path: Path, lines: int = 30) -> str:
    """The last lines of a worker's log (what its relay has already read is written first)."""
    log_relay.settle(path)
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def load_outputs(path: Path, n: int, resolution: int | None, side: str, log_path: Path) -> tuple[Any, Any]:
    """The images and latents of one generate, read from `path` (removed afterwards) and checked: `n` images
    of 3 channels at `resolution`, latents of `n`, finite values."""
    import torch

    limit = (n * 3 * resolution * resolution * 4 if resolution else 1 << 30) + (OUTPUT_SLACK_MB << 20)
    try:
        images, latents = parse_outputs(read_output(path, limit))
    except CandidateCrash as exc:
        raise CandidateCrash(f"{side} {exc}", log_tail(log_path)) from None
    finally:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass
    want = f"[{n}, 3, {resolution or 'H'}, {resolution or 'W'}]"
    if images.ndim != 4 or images.shape[0] != n or images.shape[1] != 3 or \
            (resolution and tuple(images.shape[-2:]) != (resolution, resolution)):
        raise CandidateCrash(f"{side} returned images of shape {list(images.shape)}; the seam needs {want} "
                             "(the lane's resolution)")
    if latents.ndim != 4 or latents.shape[0] != n:
        raise CandidateCrash(f"{side} returned latents of shape {list(latents.shape)}; "
                             f"expected [{n}, C, h, w]")
    if not (torch.isfinite(images).all() and torch.isfinite(latents).all()):
        raise CandidateCrash(f"{side} produced NaN/Inf outputs")
    return images, latents
