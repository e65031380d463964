"""The ledger: one typed row, an append-only file that survives torn writes, old ledgers still read."""

from __future__ import annotations

from pathlib import Path

import pytest

from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status
from pytest_dit_ar.state import ledger
from pytest_dit_ar.state.ledger import COLUMNS, COLUMNS_V1, LedgerRow


def row(i: int = 1, status: Status = Status.KEEP, **extra) -> LedgerRow:
    return LedgerRow(timestamp="2026-12-01T00:00:00+0000", run_id=f"run{i}", lane="embedded-cpu", commit="c" * 40,
                     parent="p" * 40, status=status, declared_class="exact", effective_class="exact",
                     metric="latency_ms", best_before=100.0, candidate=80.123456789, improvement_pct=19.9,
                     p_value=0.0001, description="tab\there and\nnewline", run_dir=f"runs/run{i}", **extra)


def test_columns_start_with_design_s_seventeen() -> None:
    assert COLUMNS_V1 == ("timestamp", "run_id", "lane", "commit", "parent", "status", "declared_class",
                          "effective_class", "metric", "best_before", "candidate", "improvement_pct", "p_value",
                          "peak_vram_mb", "quality_summary", "description", "run_dir")
    assert COLUMNS[:17] == COLUMNS_V1 and COLUMNS[17:] == ("reason", "flags")


def test_append_then_read_round_trips_typed_values(tmp_path: Path) -> None:
    path = tmp_path / "results.tsv"
    ledger.append(path, row(1, reason="block 2: +20%"))
    ledger.append(path, row(2, Status.CRASH, flags="unsandboxed"))
    lines = path.read_text().splitlines()
    assert lines[0].split("\t") == list(COLUMNS) and len(lines) == 3
    rows = ledger.read(path)
    assert [r.status for r in rows] == [Status.KEEP, Status.CRASH]
    assert rows[0].candidate == pytest.approx(80.1235) and rows[0].peak_vram_mb is None
    assert rows[0].description == "tab here and newline" and rows[0].reason == "block 2: +20%"
    assert rows[1].flags == "unsandboxed"
    assert rows[0].as_dict()["status"] == "keep" and isinstance(rows[0].as_dict()["p_value"], float)


def test_a_torn_last_line_is_set_aside_not_half_kept(tmp_path: Path) -> None:
    path = tmp_path / "results.tsv"
    ledger.append(path, row(1))
    with open(path, "a") as fh:
        fh.write("2026-12-01\trun-torn\tembedded")  # a write cut short by a kill
    assert [r.run_id for r in ledger.read(path)] == ["run1"]
    ledger.append(path, row(2))
    assert [r.run_id for r in ledger.read(path)] == ["run1", "run2"]
    assert [p.name for p in tmp_path.glob("results.tsv.torn-*")]


def test_a_ledger_written_before_the_extra_columns_still_reads_and_grows(tmp_path: Path) -> None:
    path = tmp_path / "results.tsv"
    old = "\t".join(row(1).cells(COLUMNS_V1))
    path.write_text("\t".join(COLUMNS_V1) + "\n" + old + "\n")
    ledger.append(path, row(2, reason="kept"))
    rows = ledger.read(path)
    assert [r.run_id for r in rows] == ["run1", "run2"] and rows[1].reason == ""  # its own columns
    assert all(len(line.split("\t")) == 17 for line in path.read_text().splitlines())


def test_a_file_that_is_not_a_ledger_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.tsv"
    path.write_text("a\tb\n1\t2\n")
    with pytest.raises(Refused, match="not a ledger header"):
        ledger.read(path)
