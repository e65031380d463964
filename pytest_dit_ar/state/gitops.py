"""Git guards and moves (GitPython): branch, clean tree, commit shape, scope, reset, best ref, worktree."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import git

from dit_ar_contract.errors import Refused

from .paths import STATE_DIR
from .writer import refuse_in_judge

BRANCH_PREFIX = "autoresearch/"


NO_HOOKS = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.hooksPath", "GIT_CONFIG_VALUE_0": "/dev/null"}


def _no_hooks(repo: git.Repo) -> git.Repo:
    """Every git command the harness runs ignores hooks (a hook planted in .git/hooks never runs)."""
    repo.git.update_environment(**NO_HOOKS)
    return repo


def open_repo(root: Path) -> git.Repo:
    try:
        return _no_hooks(git.Repo(root))
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise Refused(f"{root} is not a git repository: run `git init` and commit the project first") from None


def exclude_state_dir(repo: git.Repo) -> None:
    """Make sure .autoresearch/ is ignored even where .gitignore lacks it, so a reset never touches it."""
    exclude = Path(repo.git_dir) / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    text = exclude.read_text() if exclude.exists() else ""
    if f"/{STATE_DIR}/" not in text.split():
        exclude.write_text(text + ("" if text.endswith("\n") or not text else "\n") + f"/{STATE_DIR}/\n")


def branch_name(tag: str) -> str:
    return BRANCH_PREFIX + tag


def valid_tag(tag: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", tag)) and not tag.endswith(".lock")


def current_branch(repo: git.Repo) -> str | None:
    if repo.head.is_detached:
        return None
    return repo.active_branch.name


def head_sha(repo: git.Repo) -> str:
    try:
        return repo.head.commit.hexsha
    except ValueError:
        raise Refused("the repository has no commits yet: commit the project first") from None


def dirty_entries(repo: git.Repo) -> list[str]:
    """Modified, staged and untracked files (ignored files such as .autoresearch/ excluded)."""
    out = repo.git.status("--porcelain", "--untracked-files=all")
    return [line for line in out.splitlines() if line.strip() and not line[3:].startswith(STATE_DIR + "/")]


def require_clean(repo: git.Repo) -> None:
    dirty = dirty_entries(repo)
    if dirty:
        shown = "\n  ".join(dirty[:10]) + ("\n  ..." if len(dirty) > 10 else "")
        raise Refused(f"the working tree is not clean (commit or remove these first):\n  {shown}")


def require_branch(repo: git.Repo, tag: str) -> None:
    want, have = branch_name(tag), current_branch(repo)
    if have != want:
        raise Refused(f"on branch {have or '(detached HEAD)'}, but the session runs on {want}: "
                      f"`git checkout {want}`")


@dataclass(frozen=True)
class CommitShape:
    sha: str
    parent: str
    changed: tuple[str, ...]


def candidate_commit(repo: git.Repo, best: str) -> CommitShape:
    """HEAD must be exactly one non-merge commit on top of the current best; otherwise refuse."""
    head = repo.head.commit
    if head.hexsha == best:
        raise Refused("HEAD is the current best: commit one idea in model_under_test/ before `experiment`")
    if len(head.parents) != 1:
        raise Refused(f"HEAD {head.hexsha[:10]} is a merge commit ({len(head.parents)} parents); "
                      "commit exactly one idea on top of the current best")
    parent = head.parents[0].hexsha
    if parent != best:
        if repo.is_ancestor(best, head.hexsha):
            n = int(repo.git.rev_list("--count", f"{best}..{head.hexsha}"))
            raise Refused(f"HEAD is {n} commits ahead of the current best {best[:10]}; squash them into one "
                          f"commit (`git reset --soft {best[:10]} && git commit`) and run again")
        raise Refused(f"HEAD's parent {parent[:10]} is not the current best {best[:10]}; "
                      f"rebase your one commit onto it (`git rebase --onto {best[:10]} HEAD^`)")
    changed = repo.git.diff("--no-renames", "--name-only", parent, head.hexsha).splitlines()
    return CommitShape(sha=head.hexsha, parent=parent, changed=tuple(p for p in changed if p))


def under(path: str, prefixes: tuple[str, ...]) -> bool:
    """True when path is one of the prefixes or inside one of them (a trailing '/' marks a folder)."""
    for prefix in prefixes:
        p = prefix.rstrip("/")
        if path == p or path.startswith(p + "/"):
            return True
    return False


def out_of_scope(changed: tuple[str, ...], mutable: tuple[str, ...]) -> list[str]:
    return [p for p in changed if not under(p, mutable)]


def reset_to(repo: git.Repo, sha: str, mutable: tuple[str, ...]) -> None:
    """Reset the branch to an explicit sha and drop anything a candidate left in the mutable paths."""
    refuse_in_judge(f"the branch's reset to {sha[:10]}")
    repo.git.reset("--hard", sha)
    repo.git.clean("-fdx", "--", *[m.rstrip("/") for m in mutable])


def clean_untracked(repo: git.Repo, paths: tuple[str, ...]) -> None:
    """Remove untracked files a candidate created under `paths` (the tree was clean before the run)."""
    existing = [p.rstrip("/") for p in paths if (Path(repo.working_dir) / p.rstrip("/")).exists()]
    if existing:
        repo.git.clean("-fd", "--", *existing)


def _ref_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "lane"


def best_ref(tag: str, lane_id: str) -> str:
    return f"refs/autoresearch/{_ref_part(tag)}/best/{_ref_part(lane_id)}"


def baseline_ref(tag: str, lane_id: str) -> str:
    return f"refs/autoresearch/{_ref_part(tag)}/baseline/{_ref_part(lane_id)}"


def set_ref(repo: git.Repo, ref: str, sha: str) -> None:
    refuse_in_judge(f"the ref {ref}")
    repo.git.update_ref(ref, sha)


def read_ref(repo: git.Repo, ref: str) -> str | None:
    try:
        return repo.git.rev_parse("--verify", "--quiet", ref + "^{commit}") or None
    except git.GitCommandError:
        return None


def sync_worktree(repo: git.Repo, path: Path, sha: str) -> None:
    """Create or move the detached worktree at path to sha (used to run the best side of A/B timing)."""
    listed = repo.git.worktree("list", "--porcelain")
    registered = any(line == f"worktree {path.resolve()}" for line in listed.splitlines())
    if registered and path.is_dir():
        wt = _no_hooks(git.Repo(path))
        wt.git.checkout("--detach", "--force", sha)
        wt.git.clean("-fdx")
        return
    if path.exists():
        shutil.rmtree(path)
    repo.git.worktree("prune")
    path.parent.mkdir(parents=True, exist_ok=True)
    repo.git.worktree("add", "--detach", "--force", str(path), sha)


def changed_since(repo: git.Repo, sha: str, paths: list[str]) -> list[str]:
    """Tracked files under paths that differ between sha and the working tree."""
    if not paths:
        return []
    out = repo.git.diff("--no-renames", "--name-only", sha, "--", *paths)
    return [p for p in out.splitlines() if p]


def worktrees(repo: git.Repo) -> list[Path]:
    """Every working tree of the repository (the main one first), as `git worktree list` gives them."""
    out = repo.git.worktree("list", "--porcelain")
    return [Path(line.split(" ", 1)[1]) for line in out.splitlines() if line.startswith("worktree ")]


def private_paths(root: Path) -> list[Path]:
    """What no worker of a session at `root` may read besides its own tree's .git and state: the repository's
    common git folder (a linked worktree's .git is a pointer to it) and the .git and state of every other
    worktree, so that sessions side by side cannot read each other's baseline outputs or history."""
    try:
        repo = git.Repo(root)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return []
    common = Path(repo.git.rev_parse("--git-common-dir"))
    paths = [common if common.is_absolute() else (root / common)]
    for tree in worktrees(repo):
        if STATE_DIR not in tree.parts:  # the harness's own best and candidate trees live under a state folder
            paths += [tree / ".git", tree / STATE_DIR]
    return [p.resolve() for p in paths]
