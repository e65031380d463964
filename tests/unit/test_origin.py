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


def test_init_indexes_the_packaged_handbook_where_the_project_has_none(tmp_path: Path) -> None:
    from pytest_dit_ar.loop.init_session import _index_handbook

    paths = StatePaths(tmp_path)
    paths.dir.mkdir()
    said = _index_handbook(tmp_path, paths)  # a scaffolded repository: no handbook/ of its own
    assert said.startswith("handbook indexed into .autoresearch/handbook_index.json (the packaged handbook, ")
    assert paths.handbook_index.stat().st_size > 0
