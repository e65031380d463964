"""`dit-ar report` on a hand-built state directory, checked as HTML (the Chromium rendering is in e2e)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from report_state import PROJECT, _assert_valid_pngs, _images, _row

from dit_ar_contract.status import Status
from pytest_dit_ar.cli.main import main
from pytest_dit_ar.report.page import run_report, session_report
from pytest_dit_ar.state import ledger
from pytest_dit_ar.state.ledger import LedgerRow
from pytest_dit_ar.state.paths import StatePaths


def test_session_report_has_every_part(state: tuple[Path, list[LedgerRow]]) -> None:
    root, rows = state
    page = session_report(root / "config" / "autoresearch.json")
    assert page == root / ".autoresearch" / "report" / "index.html"
    html = page.read_text(encoding="utf-8")
    assert html.count('<tr class="s-') == len(rows)  # the ledger table: one coloured row per ledger row
    for status in Status:
        assert f'<tr class="s-{status.word}">' in html
    assert "<script>" not in html and "&lt;script&gt;" in html and "&lt;oops&gt;" in html
    assert "Fake CPU &lt;x86&gt;" in html
    assert "foreign lane on NVIDIA H200" in html and "NVIDIA H200 (target" not in html
    assert "candidate images are not stored" in html  # r3-quality has quality.json but no candidate images
    assert "no timing in this run" in html  # the crash
    assert "every case is pixel-identical" in html  # r1-perf: no image grid for identical outputs
    files = _images(page)
    names = {f.name for f in files}
    assert "aten::addmm &lt;gemm&gt;" in html
    assert {"progress-embedded-cpu.png", "profile-embedded-cpu.png", "profile-dit-xl2-256_nvidia-h200.png",
            "r2-keep-timing.png", "r2-keep-cases.png", "r3-quality-cases.png", "r0-baseline-timing.png"} <= names, names
    _assert_valid_pngs(files)
    progress = page.parent / "report_files" / "progress-embedded-cpu.png"
    assert progress.stat().st_size > 5000
    assert np.asarray(Image.open(progress).convert("L")).std() > 5


def test_run_report_and_cli(state: tuple[Path, list[LedgerRow]], capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = state
    config = root / "config" / "autoresearch.json"
    assert main(["--config", str(config), "report", "--run", "r2-keep"]) == 0
    page = Path(capsys.readouterr().out.strip())
    assert page == root / ".autoresearch" / "runs" / "r2-keep" / "report.html"
    html = page.read_text(encoding="utf-8")
    assert html.count('<tr class="s-keep">') == 1 and "block 1: candidate 150 ms" in html
    _assert_valid_pngs(_images(page))
    out = root / "elsewhere"
    assert main(["--config", str(config), "report", "--out", str(out)]) == 0
    assert Path(capsys.readouterr().out.strip()) == out / "index.html"
    _assert_valid_pngs(_images(out / "index.html"))
    assert main(["--config", str(config), "report", "--run", "no-such-run"]) == 2
    assert main(["--config", str(config), "report", "--run", "../report"]) == 2


def test_baseline_only_and_empty_state(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "config").mkdir(parents=True)
    shutil.copy(PROJECT / "config" / "autoresearch.json", root / "config" / "autoresearch.json")
    config = root / "config" / "autoresearch.json"
    empty = session_report(config)
    assert "the ledger is empty" in empty.read_text()
    paths = StatePaths(root)
    ledger.append(paths.ledger, _row("r0", "baseline", 200.0, None, "baseline"))
    page = session_report(config)
    html = page.read_text()
    assert html.count('<tr class="s-baseline">') == 1 and "no profile of this lane yet" in html
    assert "run folder .autoresearch/runs/r0 is missing" in html
    _assert_valid_pngs(_images(page))
    page = run_report(config, "r0")
    assert "s-baseline" in page.read_text()


def test_stage_times_accept_several_shapes() -> None:
    from pytest_dit_ar.report.page import _stage_ms

    assert _stage_ms({"denoise": 3, "decode": {"ms": 1.5}, "bad": "x", "nan": float("nan"), "flag": True}) == \
        {"denoise": 3.0, "decode": 1.5}
    assert _stage_ms([{"name": "denoise", "median_ms": 2.0}, "junk"]) == {"denoise": 2.0}
    assert _stage_ms(None) == {} and _stage_ms("denoise") == {}
