"""A commit that touches what the harness freezes is a DISCARD-SCOPE, found before anything of it is read
(loop/guards/frozen.py): the corpus, the config (even one that no longer parses or that widens its own scope), the
program; judged with the best commit's config. A commit of the mutable paths only, or a HEAD that is not one
commit on the best, is left to the usual guards."""

from __future__ import annotations

import json
from pathlib import Path

from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status
from pytest_dit_ar.loop.experiment import Experiment
from pytest_dit_ar.loop.guards.frozen import touched
from pytest_dit_ar.plugin.summary import prerun_lines
from pytest_dit_ar.state import ledger
from pytest_dit_ar.state.paths import StatePaths
from pytest_dit_ar.state.session import best_commit_config
from tests.helpers.user_repo import user_repo


def drop_a_case(corpus: Path) -> None:
    corpus.write_text("".join(corpus.read_text().splitlines(keepends=True)[:-1]))


def test_a_commit_that_drops_a_corpus_case_is_found(tmp_path: Path) -> None:
    user = user_repo(tmp_path)
    drop_a_case(user.corpus)
    sha = user.commit("drop a case")
    touch = touched(user.config)
    assert touch is not None and (touch.commit, touch.parent) == (sha, user.best)
    assert touch.outside == (f"corpus/{user.lane}.jsonl",) and "corpus/" in touch.reason
    assert touch.config.mutable_paths == ("model_under_test/",)


def test_a_commit_of_the_model_alone_or_not_on_the_best_is_left_to_the_guards(tmp_path: Path) -> None:
    user = user_repo(tmp_path)
    with (user.root / "model_under_test" / "pipeline.py").open("a") as f:
        f.write("\n# one idea\n")
    user.commit("one idea")
    assert touched(user.config) is None
    (user.root / "program.md").write_text("changed\n")
    user.commit("a second commit")  # two commits on the best: the commit-shape guard refuses, naming the squash
    assert touched(user.config) is None
    user.repo.git.reset("-q", "--hard", "HEAD~1")
    (user.root / "program.md").write_text("changed, not committed\n")
    assert touched(user.config) is None  # a dirty tree: refused as such


def test_a_broken_or_widened_config_is_judged_with_the_best_commits(tmp_path: Path) -> None:
    user = user_repo(tmp_path)
    raw = json.loads(user.config.read_text())
    raw["mutable_paths"] = ["."]  # would claim everything, were the commit's own config believed
    user.config.write_text(json.dumps(raw))
    user.commit("widen the scope")
    touch = touched(user.config)
    assert touch is not None and touch.outside == ("config/autoresearch.json",)
    assert touch.config.mutable_paths == ("model_under_test/",)
    user.repo.git.reset("-q", "--hard", user.best)
    user.config.write_text("{ not json")
    user.commit("break the config")
    assert touched(user.config) is not None


def test_a_commit_that_deletes_the_corpus_still_has_the_best_commits_config(tmp_path: Path) -> None:
    user = user_repo(tmp_path)
    user.corpus.unlink()
    user.commit("delete the corpus")
    config = best_commit_config(user.config)  # checked against the best's worktree, where the corpus is
    assert config is not None and config.root == user.root.resolve()
    assert touched(user.config) is not None


def test_the_corpus_edit_ends_in_a_reset_and_one_ledger_row(tmp_path: Path) -> None:
    user = user_repo(tmp_path)
    drop_a_case(user.corpus)
    sha = user.commit("drop a case")
    experiment = Experiment(user.config, None, "exact", "drop a case")
    try:
        verdict = experiment.begin(Refused("the corpus does not match its checksum"))
    finally:
        experiment.release()
    assert verdict is not None and verdict.status is Status.DISCARD_SCOPE
    assert user.repo.head.commit.hexsha == user.best and user.repo.git.status("--porcelain") == ""
    rows = ledger.read(StatePaths(user.root).ledger)
    assert [(r.status, r.commit, r.parent) for r in rows] == [(Status.DISCARD_SCOPE, sha, user.best)]
    assert user.repo.git.cat_file("-t", sha) == "commit"  # the way back: the commit is still in git
    lines = prerun_lines(experiment)  # what `dit-ar experiment` prints before the verdict line
    assert "\n".join(lines).count(f"corpus/{user.lane}.jsonl") == 1 and f"git cherry-pick -n {sha[:10]}" in lines[-1]
