"""plugin/summary.py: the terminal summary's sections, written from typed results to a stand-in reporter (the
speed lines: test_summary_lines.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from dit_ar_contract.config import load_config
from pytest_dit_ar.plugin import summary
from pytest_dit_ar.state.runs import RunPaths
from quality_suite.assessment import CaseResult, QualityAssessment
from quality_suite.gates import Check
from tests.helpers.loop import PROJECT

LANES = load_config(PROJECT / "config" / "autoresearch.json").lanes


class Reporter:
    """What the sections write: section titles and lines, in order."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def section(self, title: str) -> None:
        self.lines.append(f"== {title}")

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def test_failing_cases_name_metric_threshold_and_picture(tmp_path: Path) -> None:
    failing = Check("psnr_db", False, 12.0, 20.0, case="c1")
    quality = QualityAssessment("exact", "exact", (), {"c1": CaseResult({}, (failing,))},
                                (Check("mean_ssim", False, 0.5, 0.9),), {}, {}, {})
    evidence = SimpleNamespace(quality_result=quality, performance_result=None, run=RunPaths(tmp_path))
    tr = Reporter()
    summary.write(tr, evidence, None, speed=True, failed_ids=["quality_suite/test_quality.py::test_case[c1]"])
    assert tr.lines == ["== dit-ar quality failures", f"c1: psnr_db 12 (needs >= 20)  {tmp_path / 'diffs' / 'c1.png'}",
                        "corpus: mean_ssim: 0.5 (needs >= 0.9)",
                        "re-run: pytest 'quality_suite/test_quality.py::test_case[c1]'"]
    tr = Reporter()
    summary.write(tr, None, None, speed=True)  # a run with no evidence and no experiment writes nothing
    assert tr.lines == []
