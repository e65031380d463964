"""The git guards on a tiny repository: clean tree, branch, commit shape, scope, reset, refs, worktree."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from dit_ar_contract.errors import Refused
from pytest_dit_ar.state import gitops


@pytest.fixture
def repo(tmp_path: Path) -> git.Repo:
    r = git.Repo.init(tmp_path, initial_branch="main")
    r.git.config("user.email", "t@example.invalid")
    r.git.config("user.name", "t")
    (tmp_path / "model_under_test").mkdir()
    (tmp_path / "model_under_test" / "m.py").write_text("x = 1\n")
    (tmp_path / "fixed.py").write_text("f = 1\n")
    r.git.add("-A")
    r.git.commit("-qm", "base")
    r.git.checkout("-qb", gitops.branch_name("t1"))
    return r


def commit(repo: git.Repo, path: str, text: str) -> str:
    target = Path(repo.working_dir) / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    repo.git.add("-A")
    repo.git.commit("-qm", f"change {path}")
    return repo.head.commit.hexsha


def test_clean_tree_and_branch_guards(repo: git.Repo) -> None:
    gitops.require_clean(repo)
    gitops.require_branch(repo, "t1")
    with pytest.raises(Refused, match="git checkout autoresearch/t2"):
        gitops.require_branch(repo, "t2")
    (Path(repo.working_dir) / "stray.txt").write_text("")
    with pytest.raises(Refused, match="(?s)not clean.*stray.txt"):
        gitops.require_clean(repo)


def test_the_state_dir_never_counts_as_dirt(repo: git.Repo) -> None:
    gitops.exclude_state_dir(repo)
    gitops.exclude_state_dir(repo)  # idempotent
    (Path(repo.working_dir) / ".autoresearch").mkdir()
    (Path(repo.working_dir) / ".autoresearch" / "results.tsv").write_text("x")
    assert gitops.dirty_entries(repo) == []
    assert (Path(repo.git_dir) / "info" / "exclude").read_text().count("/.autoresearch/") == 1


def test_commit_shape_one_commit_on_the_best(repo: git.Repo) -> None:
    best = repo.head.commit.hexsha
    with pytest.raises(Refused, match="HEAD is the current best"):
        gitops.candidate_commit(repo, best)
    sha = commit(repo, "model_under_test/m.py", "x = 2\n")
    shape = gitops.candidate_commit(repo, best)
    assert (shape.sha, shape.parent, shape.changed) == (sha, best, ("model_under_test/m.py",))
    commit(repo, "model_under_test/m.py", "x = 3\n")
    with pytest.raises(Refused, match="2 commits ahead.*squash"):
        gitops.candidate_commit(repo, best)


def test_a_commit_not_on_the_best_is_refused(repo: git.Repo) -> None:
    base = repo.head.commit.hexsha
    other = commit(repo, "model_under_test/m.py", "x = 5\n")
    repo.git.reset("-q", "--hard", base)
    commit(repo, "model_under_test/m.py", "x = 6\n")
    with pytest.raises(Refused, match="rebase"):
        gitops.candidate_commit(repo, other)


def test_scope_rule() -> None:
    mutable = ("model_under_test/",)
    assert gitops.out_of_scope(("model_under_test/a.py", "model_under_test"), mutable) == []
    assert gitops.out_of_scope(("model_under_test_evil/a.py", "config/x.json"), mutable) == \
        ["model_under_test_evil/a.py", "config/x.json"]


def test_reset_to_drops_the_commit_and_untracked_files_in_mutable_paths(repo: git.Repo) -> None:
    base = repo.head.commit.hexsha
    commit(repo, "model_under_test/m.py", "x = 9\n")
    (Path(repo.working_dir) / "model_under_test" / "dropped.bin").write_bytes(b"")
    gitops.reset_to(repo, base, ("model_under_test/",))
    assert repo.head.commit.hexsha == base and gitops.dirty_entries(repo) == []


def test_refs_and_the_best_worktree(repo: git.Repo, tmp_path: Path) -> None:
    sha = repo.head.commit.hexsha
    ref = gitops.best_ref("t1", "dit-xl2-256@nvidia h200")
    assert ref == "refs/autoresearch/t1/best/dit-xl2-256-nvidia-h200"
    assert gitops.read_ref(repo, ref) is None
    gitops.set_ref(repo, ref, sha)
    assert gitops.read_ref(repo, ref) == sha
    wt = Path(repo.working_dir) / ".autoresearch" / "worktrees" / "best"
    gitops.sync_worktree(repo, wt, sha)
    (wt / "model_under_test" / "m.py").write_text("edited at run time\n")
    newer = commit(repo, "model_under_test/m.py", "x = 7\n")
    gitops.sync_worktree(repo, wt, newer)
    assert (wt / "model_under_test" / "m.py").read_text() == "x = 7\n"


@pytest.mark.parametrize("tag,ok", [("t1", True), ("dec01.run-2", True), ("-x", False), ("a b", False),
                                    ("x.lock", False), ("a" * 65, False)])
def test_valid_tags(tag: str, ok: bool) -> None:
    assert gitops.valid_tag(tag) is ok


def test_a_worker_of_one_session_cannot_read_another_worktree_s_state_or_the_shared_git(repo: git.Repo,
                                                                                         tmp_path: Path) -> None:
    main = Path(repo.working_dir).resolve()
    side = (tmp_path.parent / f"{tmp_path.name}-gpu1").resolve()
    repo.git.worktree("add", "-q", "-b", "autoresearch/gpu1", str(side))
    harness_tree = main / ".autoresearch" / "worktrees" / "best"
    repo.git.worktree("add", "-q", "--detach", str(harness_tree))
    hidden = gitops.private_paths(side)
    # a linked worktree's .git is only a pointer: the shared folder holds every session's history and refs
    assert main / ".git" in hidden and side / ".git" in hidden
    assert main / ".autoresearch" in hidden and side / ".autoresearch" in hidden
    assert not any(p == harness_tree or harness_tree in p.parents for p in hidden)
    assert gitops.private_paths(tmp_path / "not-a-repo") == []


def test_the_printed_way_back_after_a_reset_brings_the_commit_back(repo: git.Repo) -> None:
    import re

    from pytest_dit_ar.loop.experiment import way_back

    parent = repo.head.commit.hexsha
    sha = commit(repo, "fixed.py", "f = 2  # out of scope\n")
    gitops.reset_to(repo, parent, ("model_under_test/",))
    assert (Path(repo.working_dir) / "fixed.py").read_text() == "f = 1\n"
    text = way_back(sha)
    command = re.search(r"`(git cherry-pick -n [0-9a-f]+)`", text).group(1)
    repo.git.execute(command.split())
    assert (Path(repo.working_dir) / "fixed.py").read_text() == "f = 2  # out of scope\n"
    assert "git reset --hard" not in text  # back on the discarded commit is where the discard started
