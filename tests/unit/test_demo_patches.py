"""The demo's candidates are patch files that apply to the current model whatever the earlier verdicts were."""

from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path

import pytest

from dit_ar_contract.classes import WORDS as CLASSES
from dit_ar_contract.errors import Refused
from pytest_dit_ar.cli.demo import apply, candidates

PROJECT = Path(__file__).resolve().parents[2]
CANDIDATES = candidates()


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    shutil.copytree(PROJECT / "model_under_test", tmp_path / "model_under_test",
                    ignore=shutil.ignore_patterns("__pycache__"))
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    return tmp_path


def test_the_series_is_described() -> None:
    assert [c.classification for c in CANDIDATES] == ["exact", "approximate", "numerical", "exact"]
    assert all(c.classification in CLASSES and c.description and c.expect for c in CANDIDATES)
    assert "KEEP" in CANDIDATES[0].expect and "DISCARD-PERFORMANCE" in CANDIDATES[-1].expect


@pytest.mark.parametrize("kept", list(itertools.product([False, True], repeat=len(CANDIDATES) - 1)),
                         ids=lambda k: "".join("K" if x else "D" for x in k))
def test_every_candidate_applies_after_any_earlier_verdicts(repo: Path, kept: tuple[bool, ...]) -> None:
    for cand, keep in zip(CANDIDATES, kept + (True,)):
        apply(repo, cand)
        git(repo, "commit", "-qam", cand.description)
        if not keep:  # a discard: the harness resets the commit
            git(repo, "reset", "-q", "--hard", "HEAD^")


def test_a_candidate_that_no_longer_applies_is_refused(repo: Path) -> None:
    (repo / "model_under_test" / "pipeline.py").write_text("# rewritten\n")
    with pytest.raises(Refused, match="(?s)no longer applies.*make_demo_patches"):
        apply(repo, CANDIDATES[0])


def test_the_demo_refuses_a_research_branch_before_anything_runs(repo: Path) -> None:
    from pytest_dit_ar.cli.demo import check_source

    check_source(repo)  # the main line: fine
    git(repo, "checkout", "-qb", "autoresearch/mytag")
    with pytest.raises(Refused, match=r"research branch autoresearch/mytag.*`git switch (master|main)`"):
        check_source(repo)


def test_the_demo_refuses_a_clone_whose_model_the_candidates_do_not_fit(repo: Path) -> None:
    from pytest_dit_ar.cli.demo import check_clone

    check_clone(repo)
    (repo / "model_under_test" / "pipeline.py").write_text("# rewritten\n")
    with pytest.raises(Refused, match="does not apply.*fresh clone"):
        check_clone(repo)


def test_every_candidate_has_a_documented_verdict() -> None:
    from pytest_dit_ar.cli.demo import DOCUMENTED

    assert [DOCUMENTED[c.patch.stem] for c in CANDIDATES] == \
        [("KEEP",), ("KEEP",), ("DISCARD-QUALITY",), ("DISCARD-PERFORMANCE",)]



def test_the_demo_turns_its_lanes_warm_servers_on_in_a_commit_before_init(repo: Path) -> None:
    """The demo's clone commits `performance.warm_servers` for its lane (the config still parses, only that lane
    changes) before `init`, and ends the keeper when it ends (none recorded here: nothing to stop)."""
    from dit_ar_contract.config import parse_config
    from pytest_dit_ar.cli.demo import CONFIG, WARM_COMMIT, stop_warm_servers, warm_servers_on

    (repo / "config").mkdir()
    (repo / CONFIG).write_text((PROJECT / CONFIG).read_text())
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "config")
    before = parse_config((repo / CONFIG).read_text(), PROJECT / CONFIG)  # the project root: its corpus files
    subprocess.run(["git", "config", "user.name", "t"], cwd=repo, check=True)
    subprocess.run(["git", "config", "user.email", "t@t"], cwd=repo, check=True)
    warm_servers_on(repo, "embedded-cpu")
    after = parse_config((repo / CONFIG).read_text(), PROJECT / CONFIG)
    lanes = {name: lane.performance for name, lane in after.lanes.items()}
    assert lanes["embedded-cpu"].uses_warm_servers(False)
    assert not before.lanes["embedded-cpu"].performance.uses_warm_servers(False)
    assert all(lanes[n] == before.lanes[n].performance for n in lanes if n != "embedded-cpu")
    log = subprocess.run(["git", "log", "-1", "--format=%s"], cwd=repo, capture_output=True, text=True).stdout
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout
    assert log.strip() == WARM_COMMIT and status == ""
    assert stop_warm_servers(repo) is None
