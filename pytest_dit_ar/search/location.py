"""Where the handbook is: the project's own `handbook/` folder, else the copy shipped in the package.

In this repository the handbook lives at the root and is read from there. An installed wheel carries a copy
as package data (`pytest_dit_ar/handbook/`, put there by setup.py's build step), so `dit-ar search` works in a
user's repository, or in any folder, without the source tree.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGED = Path(__file__).resolve().parents[1] / "handbook"  # inside an installed pytest_dit_ar
SOURCE_TREE = Path(__file__).resolve().parents[2] / "handbook"  # an editable install's repository


def find_handbook(root: Path) -> Path | None:
    """The handbook to search from `root`: root/handbook, the packaged copy, the source tree's; None if none."""
    for candidate in (Path(root) / "handbook", PACKAGED, SOURCE_TREE):
        if candidate.is_dir() and any(candidate.rglob("*.md")):
            return candidate
    return None


def user_cache() -> Path:
    """The index cache outside any session (`$XDG_CACHE_HOME/dit-ar/`, else ~/.cache/dit-ar/): `dit-ar search`
    before `init` and `init` in a fresh clone reuse it. It is checked against the handbook's file hashes on every
    use (build_index), so a stale or foreign copy is rebuilt, never trusted."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dit-ar" / "handbook_index.json"
