"""Fingerprints of what a candidate must not change but the sandbox cannot make read-only for the harness
itself: git's hooks and config, the worktrees the sides run from, and the Python environment.

Taken before a run and compared after it; any difference stops the loop (the harness refuses to go on)
instead of being judged. The environment fingerprint is cheap (folder modification times, file counts
and the contents of every `.pth` and `*customize.py` file): it sees a file added, removed or renamed
anywhere in site-packages and any import hook, but not an existing file edited in place, which the
sandbox's read-only filesystem prevents (docs/design/sandbox-and-security.md).
"""

from __future__ import annotations

import hashlib
import os
import site
import sysconfig
from pathlib import Path

import git

from dit_ar_contract.digest import sha256_file

from . import integrity


def site_folders() -> list[Path]:
    """Every folder Python imports installed packages from."""
    names = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    user = site.getusersitepackages()
    if user:
        names.add(user)
    return sorted(Path(n).resolve() for n in names if Path(n).is_dir())


def _environment(folder: Path) -> str:
    h = hashlib.sha256()
    for root, _dirs, files in os.walk(folder):
        h.update(f"{root}:{os.stat(root).st_mtime_ns}:{len(files)}\n".encode())
        for name in files:
            if name.endswith(".pth") or name in ("sitecustomize.py", "usercustomize.py"):
                h.update(f"{name}:{sha256_file(Path(root) / name)}\n".encode())
    return h.hexdigest()


def _git_files(repo: git.Repo) -> dict[str, str]:
    git_dir = Path(repo.git_dir)
    out = {}
    hooks = git_dir / "hooks"
    if hooks.is_dir():
        out.update({f"git hook {p.name}": sha256_file(p) for p in sorted(hooks.iterdir()) if p.is_file()})
    config = git_dir / "config"
    if config.is_file():
        out["git config"] = sha256_file(config)
    return out


def _worktree(path: Path) -> str:
    if not path.is_dir():
        return "absent"
    wt = git.Repo(path)
    return wt.head.commit.hexsha + ":" + hashlib.sha256(
        wt.git.status("--porcelain", "--untracked-files=all", "--ignored").encode()).hexdigest()


def fingerprint(repo: git.Repo, worktrees: list[Path]) -> dict[str, str]:
    out = _git_files(repo)
    out.update({f"worktree {p.name}": _worktree(p) for p in worktrees})
    out.update({f"python environment {f}": _environment(f) for f in site_folders()})
    return out


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What differs, in words ("changed: git hook pre-commit", "added: git hook post-checkout", ...)."""
    return integrity.diff(before, after, gone="removed")
