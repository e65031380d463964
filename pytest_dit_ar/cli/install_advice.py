"""What `dit-ar doctor` tells a user to install: in this repository, its editable install; in a user's project, the
pip command for the missing packages, each with the version the installed pytest-dit-ar asks for."""

from __future__ import annotations

import re
import shlex
from importlib import metadata
from pathlib import Path

DIST = "pytest-dit-ar"
EDITABLE = "`pip install -e .` from the repository root"


def is_this_repository(root: Path) -> bool:
    """Whether `root` is pytest-dit-ar's own source tree (its pyproject.toml names the project)."""
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False
    return re.search(rf'^name\s*=\s*"{re.escape(DIST)}"', text, re.MULTILINE) is not None


def requirements() -> dict[str, str]:
    """pytest-dit-ar's own requirements (canonical name -> `name>=version`), as installed; {} when it is not."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    try:
        listed = metadata.requires(DIST) or []
    except metadata.PackageNotFoundError:
        return {}
    found = {}
    for line in listed:
        req = Requirement(line)
        if req.marker is None:  # the extras (test tools) are not what doctor checks
            found[canonicalize_name(req.name)] = f"{req.name}{req.specifier}"
    return found


def unmet() -> tuple[list[str], list[str]]:
    """pytest-dit-ar's own requirements this environment lacks, and those it has in a version they do not accept
    ('name found X, needs SPEC'): what an install with `pip install --no-deps` leaves to the user."""
    from packaging.requirements import Requirement

    try:
        listed = metadata.requires(DIST) or []
    except metadata.PackageNotFoundError:
        return [], []
    missing, wrong = [], []
    for req in (Requirement(line) for line in listed):
        if req.marker is not None:  # the extras (test tools, ray) are not what doctor checks
            continue
        try:
            found = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            missing.append(req.name)
            continue
        if not req.specifier.contains(found, prereleases=True):
            wrong.append(f"{req.name} {found} (needs {req.name}{req.specifier})")
    return missing, wrong


def canonical(name: str) -> str:
    from packaging.utils import canonicalize_name

    return canonicalize_name(name)


def install_command(missing: list[str], root: Path) -> str:
    """How to install `missing` (distribution names) where the project at `root` is."""
    if is_this_repository(root):
        return EDITABLE
    from packaging.utils import canonicalize_name

    wanted = requirements()
    return "`pip install " + " ".join(shlex.quote(wanted.get(canonicalize_name(n), n)) for n in missing) + "`"
