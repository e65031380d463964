"""session.json as a typed record, the lane-name rule with a session, and sessions made before this layout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dit_ar_contract.device import DeviceIdentity
from dit_ar_contract.errors import Refused
from pytest_dit_ar.state.files import write_json_atomic
from pytest_dit_ar.state.paths import StatePaths
from pytest_dit_ar.state.session import (
    LAYOUT,
    LaneBaseline,
    SessionRecord,
    open_session,
    read_record,
    session_lane_name,
)

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    shutil.copytree(PROJECT / "config", tmp_path / "config")
    corpus = tmp_path / "quality_suite" / "corpus"
    shutil.copytree(PROJECT / "quality_suite" / "corpus", corpus)
    return tmp_path


def record(**changes) -> SessionRecord:
    values = dict(tag="t1", branch="autoresearch/t1", lane="embedded-cpu", lane_id="embedded-cpu",
                  device=DeviceIdentity("cpu", "Some CPU"), on_target=True, baseline_commit="a" * 40,
                  init_time="2026-12-01T00:00:00+0000", config="config/autoresearch.json", config_sha256="x",
                  layout=LAYOUT)
    return SessionRecord(**{**values, **changes})


def test_record_round_trip() -> None:
    rec = record().with_baseline("embedded-cpu", LaneBaseline("m" * 64, "a" * 40, "run1"))
    assert SessionRecord.from_dict(json.loads(json.dumps(rec.as_dict()))) == rec


def test_no_session_is_refused_with_the_command_to_run(root: Path) -> None:
    with pytest.raises(Refused, match="init --tag"):
        open_session(root / "config" / "autoresearch.json")
    assert open_session(root / "config" / "autoresearch.json", need_session=False).record is None


def test_the_session_s_lane_is_the_default_and_another_lane_is_refused(root: Path) -> None:
    write_json_atomic(StatePaths(root).session, record().as_dict())
    config = root / "config" / "autoresearch.json"
    assert open_session(config).lane.name == "embedded-cpu"
    with pytest.raises(Refused, match="start a new session"):
        open_session(config, "dit-xl2-256")
    from dit_ar_contract.config import load_config

    assert session_lane_name(load_config(config)) == "embedded-cpu"


def test_a_session_made_before_the_layered_layout_reads_but_refuses_to_run(root: Path) -> None:
    old = record().as_dict()
    del old["layout"]  # what `dit-ar init` wrote before
    write_json_atomic(StatePaths(root).session, old)
    session = open_session(root / "config" / "autoresearch.json")
    assert read_record(StatePaths(root)).layout == 1 and session.record.tag == "t1"
    with pytest.raises(Refused, match="earlier layout.*init --tag NEW"):
        session.require_current_layout()


def test_status_all_lists_the_session_of_every_worktree(root: Path) -> None:
    import git

    from pytest_dit_ar.cli.status import everywhere

    repo = git.Repo.init(root, initial_branch="main")
    repo.git.config("user.email", "t@example.invalid")
    repo.git.config("user.name", "t")
    (root / ".gitignore").write_text(".autoresearch/\n")
    repo.git.add("-A")
    repo.git.commit("-qm", "project")
    write_json_atomic(StatePaths(root).session, record(tag="gpu0").as_dict())
    second = root.parent / "second"
    repo.git.worktree("add", "-q", "-b", "autoresearch/gpu1", str(second))
    write_json_atomic(StatePaths(second).session, record(tag="gpu1", branch="autoresearch/gpu1").as_dict())
    third = root.parent / "third"  # a worktree without a session says so instead of failing the command
    repo.git.worktree("add", "-q", "-b", "other", str(third))
    repo.git.worktree("add", "-q", "--detach", str(root / ".autoresearch" / "worktrees" / "best"))  # the harness's
    infos = everywhere(root / "config" / "autoresearch.json", rows=5)
    assert [i.worktree.name for i in infos] == [root.name, "second", "third"]
    assert [i.status.tag if i.status else None for i in infos] == ["gpu0", "gpu1", None]
    assert "init --tag" in infos[2].problem
    assert infos[0].as_dict()["tag"] == "gpu0" and "problem" in infos[2].as_dict()  # the --json shape
