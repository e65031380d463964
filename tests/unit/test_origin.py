"""Sessions keep their origin: a new session elsewhere than the lane's recorded baseline must say so; the
software stack of an experiment must be its baseline's."""

from __future__ import annotations

from pathlib import Path

import pytest

from dit_ar_contract import versions
from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status
from pytest_dit_ar.loop.init_session import check_origin
from pytest_dit_ar.state import ledger
from pytest_dit_ar.state.ledger import LedgerRow
from pytest_dit_ar.state.paths import StatePaths

ORIGIN, BEST = "a" * 40, "b" * 40


def paths_with_baseline(tmp_path: Path, lane: str = "embedded-cpu@cpu") -> StatePaths:
    paths = StatePaths(tmp_path)
    paths.dir.mkdir(parents=True)
    ledger.append(paths.ledger, LedgerRow("t", "r1", lane, ORIGIN, "", Status.BASELINE))
    ledger.append(paths.ledger, LedgerRow("t", "r2", lane, BEST, ORIGIN, Status.KEEP))
    return paths


def test_a_session_at_the_best_commit_is_refused_without_new_baseline(tmp_path: Path) -> None:
    paths = paths_with_baseline(tmp_path)
    with pytest.raises(Refused, match="--new-baseline"):
        check_origin(paths, "embedded-cpu@cpu", BEST, new_baseline=False)
    assert check_origin(paths, "embedded-cpu@cpu", BEST, new_baseline=True) == ORIGIN[:12]


def test_the_recorded_origin_another_lane_or_an_empty_ledger_need_no_flag(tmp_path: Path) -> None:
    paths = paths_with_baseline(tmp_path)
    assert check_origin(paths, "embedded-cpu@cpu", ORIGIN, new_baseline=False) == ""
    assert check_origin(paths, "dit-xl2-256@nvidia-h200", BEST, new_baseline=False) == ""
    assert check_origin(StatePaths(tmp_path / "empty"), "embedded-cpu@cpu", BEST, new_baseline=False) == ""


def test_a_changed_torch_or_driver_is_named() -> None:
    recorded = {"torch": "2.14.1", "diffusers": "0.42.1", "nvidia_driver": "550.1", "python": "3.11.7"}
    current = {**recorded, "torch": "2.15.0", "nvidia_driver": "560.2"}
    assert versions.stack_differences(recorded, current) == ["torch 2.14.1 -> 2.15.0", "nvidia_driver 550.1 -> 560.2"]
    assert versions.stack_differences(recorded, dict(recorded)) == []
    assert versions.stack_differences({"torch": "2.14.1"}, {"torch": "2.14.1", "cudnn": "9"}) == []  # unrecorded part


def test_init_indexes_the_packaged_handbook_where_the_project_has_none(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_dit_ar.loop.init_session import _index_handbook

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    paths = StatePaths(tmp_path)
    paths.dir.mkdir()
    said = _index_handbook(tmp_path, paths)  # a scaffolded repository: no handbook/ of its own
    assert said.startswith("handbook indexed into .autoresearch/handbook_index.json (the packaged handbook, ")
    assert paths.handbook_index.stat().st_size > 0


def test_a_fresh_clone_reuses_the_users_index_and_a_stale_one_is_rebuilt(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """init in a fresh clone (the demo) and search before init use the index cached outside any session;
    build_index checks it against the handbook's file hashes, so a changed handbook is indexed again."""
    import json

    from pytest_dit_ar.loop.init_session import _index_handbook
    from pytest_dit_ar.search.engine import search
    from pytest_dit_ar.search.location import user_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert user_cache() == tmp_path / "cache" / "dit-ar" / "handbook_index.json"
    handbook = tmp_path / "one" / "handbook"
    handbook.mkdir(parents=True)
    (handbook / "graphs.md").write_text("# CUDA graphs\n\nCapture the denoiser once, replay it.\n")
    _index_handbook(tmp_path / "one", StatePaths(tmp_path / "one"))
    assert set(json.loads(user_cache().read_text())["files"]) == {"graphs.md"}
    (handbook / "fusion.md").write_text("# Fused attention\n\nOne kernel for QKV.\n")
    clone = StatePaths(tmp_path / "one")
    clone.handbook_index.unlink()
    _index_handbook(tmp_path / "one", clone)  # starts from the user's copy, finds it stale, rebuilds
    assert set(json.loads(clone.handbook_index.read_text())["files"]) == {"graphs.md", "fusion.md"}
    assert [h.path for h in search("fused attention kernel", handbook, cache_path=user_cache())][:1] == ["fusion.md"]
