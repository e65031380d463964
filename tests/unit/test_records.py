"""state/records.py writes a finished run in the order its docstring promises: the run folder first (nothing
points at it yet), then the ledger row, then the best ref, best.json and the best worktree; for a baseline the
lane's baseline folder and session.json's pointer to it come before the ledger row."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from dit_ar_contract.device import DeviceIdentity
from dit_ar_contract.status import Status
from pytest_dit_ar.state import records
from pytest_dit_ar.state.baseline import BaselineSummary, BaselineTiming
from pytest_dit_ar.state.best import Measurements
from pytest_dit_ar.state.ledger import LedgerRow
from pytest_dit_ar.state.paths import StatePaths
from pytest_dit_ar.state.session import SessionRecord


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """The writes records.py makes, in order, named by what they write (git calls are recorded, not run)."""
    order: list[str] = []
    root = tmp_path

    def named(path: Path) -> str:
        return str(Path(path).relative_to(root))

    real_record, real_json = records.write_record, records.write_json_atomic
    monkeypatch.setattr(records, "write_record", lambda p, d: (order.append(named(p)), real_record(p, d))[1])
    monkeypatch.setattr(records, "write_json_atomic", lambda p, d: (order.append(named(p)), real_json(p, d))[1])
    real_append = records.ledger.append
    monkeypatch.setattr(records.ledger, "append", lambda p, row: (order.append("ledger row"), real_append(p, row))[1])
    monkeypatch.setattr(records.gitops, "set_ref", lambda repo, ref, sha: order.append(f"ref {ref}"))
    monkeypatch.setattr(records.gitops, "sync_worktree", lambda repo, path, sha: order.append("best worktree"))
    monkeypatch.setattr(records.backup, "save_folder", lambda repo, folder, ref, msg: order.append(f"git copy {ref}"))
    return order


def _session(root: Path) -> SimpleNamespace:
    record = SessionRecord("t1", "autoresearch/t1", "embedded-cpu", "embedded-cpu", DeviceIdentity("cpu", "CPU"), True,
                           "a" * 40, "2026-12-01T00:00:00+0000", "config/autoresearch.json", "x")
    paths = StatePaths(root)
    return SimpleNamespace(paths=paths, record=record, started=record, lane_id="embedded-cpu",
                           baseline_dir=paths.baseline("embedded-cpu"))


def _row(status: Status, run_dir: str) -> LedgerRow:
    return LedgerRow("2026-12-01T00:00:00+0000", "r1", "embedded-cpu", "c" * 40, "a" * 40, status, run_dir=run_dir)


def test_an_experiment_writes_run_record_then_ledger_then_best(writes: list[str], tmp_path: Path) -> None:
    session = _session(tmp_path)
    run_dir = session.paths.run("r1")
    records.record_experiment(session, None, _row(Status.KEEP, ".autoresearch/runs/r1"), run_dir, ["faster"], 1.0,
                              Measurements(90.0, 95.0))
    assert writes == [".autoresearch/runs/r1/experiment.json", "ledger row",
                      "ref refs/autoresearch/t1/best/embedded-cpu", ".autoresearch/best.json", "best worktree"]


def test_a_discard_writes_no_best(writes: list[str], tmp_path: Path) -> None:
    session = _session(tmp_path)
    records.record_experiment(session, None, _row(Status.DISCARD_QUALITY, ""), session.paths.run("r1"), [], 1.0)
    assert writes == [".autoresearch/runs/r1/experiment.json", "ledger row"]


def test_a_baseline_writes_its_folder_and_pointer_before_the_ledger_and_the_best(writes: list[str],
                                                                                tmp_path: Path) -> None:
    session = _session(tmp_path)
    summary = BaselineSummary("embedded-cpu", "embedded-cpu", "a" * 40, "r0", "", (), "", {}, {}, {}, {}, {}, {}, {},
                              BaselineTiming(median_ms=100.0, p95_ms=110.0))
    record = records.record_baseline(session, None, summary, _row(Status.BASELINE, ""), session.paths.run("r0"))
    folder = ".autoresearch/baseline/embedded-cpu"
    assert writes == [".autoresearch/runs/r0/baseline.json", f"{folder}/baseline.json", f"{folder}/manifest.json",
                      "git copy refs/autoresearch/t1/baseline/embedded-cpu", ".autoresearch/session.json", "ledger row",
                      "ref refs/autoresearch/t1/best/embedded-cpu", ".autoresearch/best.json", "best worktree"]
    assert record.baselines["embedded-cpu"].commit == "a" * 40 and session.record is record
