"""`dit-ar report` on a hand-built state directory, checked as HTML (the Chromium rendering is in e2e)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dit_ar_contract.status import Status
from pytest_dit_ar.cli.main import main
from pytest_dit_ar.report import page as page_module
from pytest_dit_ar.report.page import run_report, session_report
from pytest_dit_ar.state import ledger
from pytest_dit_ar.state.baseline import BaselineSummary
from pytest_dit_ar.state.files import write_json_atomic
from pytest_dit_ar.state.ledger import LedgerRow
from pytest_dit_ar.state.paths import StatePaths
from tests.helpers.report_state import PROJECT, _assert_valid_pngs, _images, _row


def test_session_report_has_every_part(state: tuple[Path, list[LedgerRow]]) -> None:
    root, rows = state
    page = session_report(root / "config" / "autoresearch.json")
    assert page == root / ".autoresearch" / "report" / "index.html"
    html = page.read_text(encoding="utf-8")
    assert html.count('<tr class="s-') == len(rows)  # the ledger table: one coloured row per ledger row
    for status in Status:
        assert f'<tr class="s-{status.word}">' in html
    assert "<script>" not in html and "&lt;script&gt;" in html and "&lt;oops&gt;" in html
    assert 'href="summary.md"' in html and (page.parent / "summary.md").is_file()  # the PR-ready text, linked
    assert "the chain re-validated at +3.00% but its steps claim +25.00%" in html  # the disagreement, on top
    assert "holdout: passes 10/10" in (page.parent / "summary.md").read_text()
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
    from pytest_dit_ar.state.runs import stage_ms as _stage_ms

    assert _stage_ms({"denoise": 3, "decode": {"ms": 1.5}, "bad": "x", "nan": float("nan"), "flag": True}) == \
        {"denoise": 3.0, "decode": 1.5}
    assert _stage_ms([{"name": "denoise", "median_ms": 2.0}, "junk"]) == {"denoise": 2.0}
    assert _stage_ms(None) == {} and _stage_ms("denoise") == {}


# -- the page is rendered from templates that escape every value ---------------------------------

PAYLOAD = '<script>alert(1)</script> "onload=alert(2)'
PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4", "p", "code", "table", "tr",
             "th", "td", "div", "ul", "li", "pre", "img", "a"}  # a: the template's link to summary.md


class _Markup(HTMLParser):
    """The tags and attributes of a page, and its text (entities decoded)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _markup(page: Path) -> _Markup:
    """The parsed page."""
    parsed = _Markup()
    parsed.feed(page.read_text(encoding="utf-8"))
    return parsed


def _plant_payload(root: Path) -> None:
    """Put PAYLOAD in every free text the report shows: session, ledger, run record, crash, quality, perf, profile."""
    paths = StatePaths(root)
    session = json.loads(paths.session.read_text())
    write_json_atomic(paths.session, session | {"tag": PAYLOAD, "device": {"kind": "cpu", "name": PAYLOAD}})
    write_json_atomic(paths.best, {"embedded-cpu": {"commit": PAYLOAD, "run_id": PAYLOAD,
                                                    "measurements": {PAYLOAD: 1.0}}})
    run_id = 'r9"onload=alert(3)'  # a folder name may hold quotes: it goes into an id attribute
    run = paths.run(run_id)
    write_json_atomic(run / "experiment.json", {"reasons": [PAYLOAD]})
    (run / "crash.txt").write_text(f"Traceback\n{PAYLOAD}\n")
    quality = json.loads((paths.run("r3-quality") / "quality.json").read_text())
    write_json_atomic(run / "quality.json", quality | {"audit_reasons": [PAYLOAD], "failures": [PAYLOAD + " 2"],
                                                       "declared_class": PAYLOAD})
    perf = json.loads((paths.run("r1-perf") / "perf.json").read_text())
    write_json_atomic(run / "perf.json", perf | {"reasons": [PAYLOAD], "seconds": {PAYLOAD: 1.0}})
    row = _row(run_id, "discard-quality", 120.0, 150.0, PAYLOAD)
    ledger.append(paths.ledger, dataclasses.replace(row, run_dir=f".autoresearch/runs/{run_id}", metric=PAYLOAD))
    profile = paths.run("profile-20250101-000000") / "profile.json"
    data = json.loads(profile.read_text())
    data["summary"]["top_ops"] = [{"name": PAYLOAD, "self_ms": 1.0, "calls": 1}]
    write_json_atomic(profile, data | {"device": PAYLOAD})


def test_state_text_is_escaped_never_markup(state: tuple[Path, list[LedgerRow]]) -> None:
    root, _ = state
    _plant_payload(root)
    config = root / "config" / "autoresearch.json"
    for page in (session_report(config), run_report(config, 'r9"onload=alert(3)')):
        html = page.read_text(encoding="utf-8")
        parsed = _markup(page)
        assert {tag for tag, _ in parsed.tags} <= PAGE_TAGS, "a value of the state became a tag"
        attributes = {name for _, attrs in parsed.tags for name, _ in attrs}
        assert attributes <= {"lang", "charset", "class", "id", "src", "alt", "href"}, attributes  # href: summary.md
        assert "<script" not in html and '"onload=' not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "".join(parsed.text).count(PAYLOAD) >= 8  # shown as text: title, device, reasons, crash, ledger...
        assert ('div', [('class', 'run s-discard-quality'), ('id', 'run-r9"onload=alert(3)')]) in parsed.tags


def test_page_is_rendered_from_the_package_templates() -> None:
    env = page_module.environment()
    assert env.autoescape is True
    assert {"base.html", "session.html", "run.html", "macros.html"} <= set(env.list_templates())
    assert env.from_string("{{ value }}").render(value=PAYLOAD) == \
        "&lt;script&gt;alert(1)&lt;/script&gt; &#34;onload=alert(2)"
    source = Path(page_module.__file__).read_text(encoding="utf-8")
    tags = re.findall(r"</?(?:html|head|body|style|title|h\d|p|div|span|table|tr|td|th|ul|li|pre|img|code|a)\b",
                      source)
    assert tags == [], f"page.py writes HTML itself: {tags}"
    assert "html.escape" not in source and "Markup(" not in source


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A setuptools package-data glob as a regex (`**` crosses folders, `*` does not)."""
    parts = re.split(r"(\*\*/|\*\*|\*|\?)", pattern)
    table = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}
    return re.compile("".join(table.get(p, re.escape(p)) for p in parts))


def test_templates_are_package_data() -> None:
    import tomllib

    project = Path(__file__).resolve().parents[2]
    patterns = tomllib.loads((project / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    package = project / "pytest_dit_ar"
    files = [p.relative_to(package).as_posix() for p in (package / "report" / "templates").rglob("*") if p.is_file()]
    assert "report/templates/session.html" in files and "report/templates/report.css" in files
    missing = [f for f in files if not any(_glob_regex(p).fullmatch(f) for p in patterns["pytest_dit_ar"])]
    assert missing == [], f"not declared as package data (a wheel would lack them): {missing}"


def test_gpu_seconds_per_image_count_every_gpu_the_worker_held(tmp_path: Path) -> None:
    from pytest_dit_ar.report.page import _gpu_seconds
    from pytest_dit_ar.state.runs import read_baseline

    def baseline(tmp: Path, workload: dict) -> BaselineSummary:
        write_json_atomic(tmp / "baseline.json", {"workload": workload})
        return read_baseline(tmp / "baseline.json")

    two = baseline(tmp_path, {"device": "cuda", "gpus": 2, "batch": 4})
    # 400 ms per batch of 4 on 2 GPUs = 0.2 GPU-s per image; the best at 300 ms on the same lane: 0.15
    assert _gpu_seconds(two, 400.0, 300.0) == "baseline 0.2, best 0.15 (2 GPUs, batch 4)"
    assert _gpu_seconds(baseline(tmp_path, {"device": "cuda", "batch": 2}), 100.0, None) == \
        "baseline 0.05 (1 GPU, batch 2)"
    assert _gpu_seconds(baseline(tmp_path, {"device": "cpu", "batch": 2}), 100.0, 90.0) == "not a GPU lane"
