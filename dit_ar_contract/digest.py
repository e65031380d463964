"""sha256 of files, the one digest used for integrity snapshots, manifests and corpus checksums."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    """The file's sha256; a symbolic link hashes its target path, never what it points to."""
    h = hashlib.sha256()
    if path.is_symlink():
        h.update(b"symlink:" + str(path.readlink()).encode())
        return h.hexdigest()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
