"""plugin/summary.py: the terminal summary's sections, written from typed results to a stand-in reporter."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from dit_ar_contract.config import load_config
from pytest_dit_ar.loop.measurement import PerfOutcome, SegmentRecord
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


def _perf(cand_s: list[float], best_s: list[float]) -> PerfOutcome:
    segment = SegmentRecord(0, cand_s, best_s, [], [], {"cand": [], "best": []}, {}, {"cand": {}, "best": {}}, [])
    return PerfOutcome(False, ["not faster"], [segment], {}, {})


def test_latencies_in_words_and_gpu_seconds_on_gpu_lanes() -> None:
    perf = _perf([0.2, 0.2], [0.4, 0.4])
    assert summary.latencies(perf, LANES["embedded-cpu"]) == "candidate 200.0 ms vs best 400.0 ms per batch"
    two = summary.latencies(perf, LANES["dit-xl2-256-x2"])
    assert two.startswith("candidate 200.0 ms vs best 400.0 ms per batch (") and "on 2 GPUs" in two
    assert summary.latencies(_perf([], []), LANES["embedded-cpu"]) == "no timed rounds"


def test_failing_cases_name_metric_threshold_and_picture(tmp_path: Path) -> None:
    failing = Check("psnr_db", False, 12.0, 20.0, case="c1")
    quality = QualityAssessment("exact", "exact", (), {"c1": CaseResult({}, (failing,))},
                                (Check("mean_ssim", False, 0.5, 0.9),), {}, {}, {})
    evidence = SimpleNamespace(quality_result=quality, performance_result=None, run=RunPaths(tmp_path))
    tr = Reporter()
    summary.write(tr, evidence, None, speed=True)
    assert tr.lines == ["== dit-ar quality failures", f"c1: psnr_db 12 (needs >= 20)  {tmp_path / 'diffs' / 'c1.png'}",
                        "corpus: mean_ssim: 0.5 (needs >= 0.9)"]
    tr = Reporter()
    summary.write(tr, None, None, speed=True)  # a run with no evidence and no experiment writes nothing
    assert tr.lines == []
