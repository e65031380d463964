"""Keep a copy of a state folder (the baseline) in git's object store under a ref, and restore it.

The state dir is ignored by git, so `git reset` never touches it; this copy lets a damaged or deleted
baseline be restored with `dit-ar recover`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import git

from .writer import refuse_in_judge


def _git(repo: git.Repo, work_tree: Path, index: str) -> git.Git:
    g = git.Git(repo.working_dir)
    g.update_environment(GIT_INDEX_FILE=index, GIT_WORK_TREE=str(work_tree), GIT_DIR=repo.git_dir)
    return g


def save_folder(repo: git.Repo, folder: Path, ref: str, message: str) -> str:
    """Commit the folder's files to a parentless commit under `ref` (not on any branch)."""
    refuse_in_judge(f"the ref {ref}")
    with tempfile.TemporaryDirectory(prefix="dit-ar-idx-") as tmp:
        g = _git(repo, folder, os.path.join(tmp, "index"))
        g.add("--all", "--force", ".")
        tree = g.write_tree()
        commit = g.commit_tree(tree, "-m", message)
    repo.git.update_ref(ref, commit)
    return commit


def restore_folder(repo: git.Repo, folder: Path, ref: str) -> None:
    """Write the files saved under `ref` back into the folder (existing files are overwritten)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dit-ar-idx-") as tmp:
        g = _git(repo, folder, os.path.join(tmp, "index"))
        g.read_tree(ref)
        g.checkout_index("--all", "--force")


def restore_baseline(repo: git.Repo, folder: Path, ref: str) -> None:
    """Restore a damaged baseline folder from its saved copy: the saved files back, and any file its saved
    manifest does not list removed."""
    from . import integrity
    from .files import read_json

    restore_folder(repo, folder, ref)
    kept = read_json(folder / integrity.MANIFEST)["files"]
    for extra in set(integrity.manifest_of(folder)) - set(kept):
        (folder / extra).unlink()
