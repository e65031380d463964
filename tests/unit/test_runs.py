"""The run folder's typed shape (state/runs.py): what the loop writes reads back as the same types, records carry
a format version, a newer format is refused, and records of earlier versions still read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dit_ar_contract.errors import Refused
from dit_ar_contract.sides import Role, Sides
from dit_ar_contract.status import Status
from perf_suite.sequential import Look
from pytest_dit_ar.state import runs
from pytest_dit_ar.state.baseline import BaselineSummary, BaselineTiming
from pytest_dit_ar.state.files import FORMAT_VERSION, VERSION_KEY, load_record, write_json_atomic, write_record
from pytest_dit_ar.state.ledger import LedgerRow
from pytest_dit_ar.state.perf_record import BlockStats, MemoryFigures, PerfRecord, SegmentRecord
from pytest_dit_ar.state.runs import ExperimentRecord, RunPaths
from quality_suite.assessment import CaseResult, QualityAssessment
from quality_suite.gates import Check


def _look(decision: str = "keep") -> Look:
    return Look(segments=2, rounds=16, decision=decision, estimate_pct=12.5, lower_pct=8.0, upper_pct=17.0, z=-4.2,
                boundary=-2.9, standard_error=0.01, offset_sd=0.02, reason="faster")


def _segment(index: int) -> SegmentRecord:
    return SegmentRecord(index, [0.09, 0.091], [0.1, 0.101], [[1], [2]], ["CB", "BC"], Sides([0.2], [0.2]),
                         Sides(1.0, 1.1), Sides(MemoryFigures(peak_rss_mb=500.0), MemoryFigures(peak_rss_mb=510.0)),
                         [], _look())


def test_a_perf_outcome_reads_back_as_a_typed_record(tmp_path: Path) -> None:
    outcome = PerfRecord(True, ["faster"], [_segment(0), _segment(1)], {"timed": 3.0}, {"peak_mb": 500.0})
    run = RunPaths(tmp_path)
    write_record(run.perf, outcome.to_dict())
    perf = runs.read_perf(tmp_path)
    assert perf is not None and perf.keep is True and perf.sequential and perf.reasons == ["faster"]
    assert [s.index for s in perf.segments] == [0, 1] and perf.segments[1].cand_s == [0.09, 0.091]
    assert repr(perf.segments[0].look) == repr(_look()) and perf.seconds == {"timed": 3.0}  # repr: NaN fields
    assert load_record(run.perf)[VERSION_KEY] == FORMAT_VERSION


OLD_PERF = Path(__file__).resolve().parents[1] / "helpers" / "records" / "perf-v1.json"


@pytest.mark.parametrize("layout", ["pair", "alternate"])
def test_a_perf_json_of_the_previous_harness_reads_and_writes_back_the_same(layout: str) -> None:
    """perf-v1.json holds what the previous harness's measure() wrote (stand-in workers of
    test_measurement_layouts, both layouts), without a format version: it reads as version 1, into the types
    the writer uses, and writes back the same keys and values (with its version)."""
    old = json.loads(OLD_PERF.read_text())[layout]
    perf = PerfRecord.from_dict(old)
    assert perf.keep is True and perf.look is not None and perf.segments[0].layout == layout
    assert perf.segments[0].memory.candidate.peak_rss_mb == 100.0 and perf.segments[0].build_s.best >= 0.0
    assert json.dumps(perf.to_dict(), sort_keys=True) == json.dumps({**old, VERSION_KEY: 1}, sort_keys=True)


def test_the_perf_record_refuses_a_version_it_does_not_know() -> None:
    with pytest.raises(Refused, match="perf record: file format version 2 is not supported .*reads up to 1"):
        PerfRecord.from_dict({"keep": True, "segments": [], VERSION_KEY: 2})
    with pytest.raises(Refused, match="file format version 'one' is not supported"):
        PerfRecord.from_dict({"keep": True, "segments": [], VERSION_KEY: "one"})


def test_a_perf_record_is_read_by_role() -> None:
    perf = PerfRecord(False, ["slower"], [_segment(0)])
    assert perf.median_ms(Role.CANDIDATE) == pytest.approx(90.5)
    assert perf.median_ms(Role.BEST) == pytest.approx(100.5)
    assert perf.peak_memory_mb(Role.BEST) == 510.0 and perf.startup().warmup_rounds == Sides([1], [1])
    assert perf.forked_workers() is None


def test_a_quality_assessment_round_trips(tmp_path: Path) -> None:
    failing = Check("psnr_db", False, 12.0, 20.0, case="c1", message="too far")
    quality = QualityAssessment("exact", "numerical", ("raised: latents moved",),
                                {"c1": CaseResult({"psnr_db": 12.0}, (failing,), True),
                                 "c2": CaseResult({"psnr_db": 60.0}, (Check("psnr_db", True, 60.0, 20.0, "c2"),))},
                                (Check("mean_psnr_db", True, 36.0, 30.0),), {"psnr_db": {"worst": 12.0}}, {"acc": 0.9},
                                {"acc": 0.95}, "computed with alex", {"c1": {"psnr_db": 12.0}, "c2": {"psnr_db": 60.0}})
    write_record(RunPaths(tmp_path).quality, quality.as_dict())
    assert runs.read_quality(tmp_path) == quality
    assert runs.read_quality(tmp_path / "absent") is None


def test_an_experiment_record_holds_its_ledger_row(tmp_path: Path) -> None:
    row = LedgerRow("2026-12-01T00:00:00+0000", "r1", "embedded-cpu", "c" * 40, "p" * 40, Status.DISCARD_QUALITY,
                    "exact", "numerical", "latency_ms", 100.0, 90.0, 10.0, 0.001, 512.0, "class=numerical", "bf16",
                    ".autoresearch/runs/r1", "quality", "unsandboxed")
    write_record(RunPaths(tmp_path).experiment, {**row.as_dict(), "reasons": ["psnr"], "duration_s": 12.0,
                                                 "seconds": {"total": 12.0}, "software": {"torch": "2.4"}})
    record = runs.read_experiment(tmp_path)
    assert record == ExperimentRecord(row, ("psnr",), 12.0, {"total": 12.0}, {"torch": "2.4"})
    write_json_atomic(RunPaths(tmp_path).experiment, {"reasons": ["cut short"]})  # a partial record: no row
    assert runs.read_experiment(tmp_path) == ExperimentRecord(None, ("cut short",))


def test_a_record_of_a_newer_format_is_refused(tmp_path: Path) -> None:
    path = RunPaths(tmp_path).perf
    write_json_atomic(path, {"keep": True, VERSION_KEY: FORMAT_VERSION + 1})
    with pytest.raises(Refused, match=f"perf.json: file format version {FORMAT_VERSION + 1} is not supported"):
        runs.read_perf(tmp_path)


def test_records_of_earlier_versions_still_read(tmp_path: Path) -> None:
    block = {"index": 0, "cand_s": [0.15], "best_s": [0.2], "divergence": 0.01,
             "stats": {"rounds": 10, "median_ratio": 0.75, "passes": True, "mwu_p_value": 0.002}}
    write_json_atomic(RunPaths(tmp_path).perf, {"keep": True, "blocks": [block]})  # before the sequential test
    perf = runs.read_perf(tmp_path)
    assert perf is not None and not perf.sequential and not perf.segments[0].is_segment
    assert perf.segments[0].stats == BlockStats(rounds=10, median_ratio=0.75, passes=True)
    summary = BaselineSummary.from_dict({"lane": "l", "lane_id": "l", "commit": "c", "run_id": "r", "created": "",
                                         "cases": [], "corpus_sha256": "", "workload": {}, "environment": {},
                                         "evidence": {}, "envelope": {}, "envelope_runs": {}, "task_metrics": {},
                                         "task_case_pass": {}, "timing": {"median_ms": 2.0, "aa_block": block}})
    assert summary.timing == BaselineTiming(median_ms=2.0, aa_segment=block)
    aa = PerfRecord.aa_segment(summary)
    assert aa is not None and aa.segments[0].cand_s == [0.15] and "A/A" in aa.reasons[0]


def test_a_run_folder_names_its_files_once(tmp_path: Path) -> None:
    run = RunPaths(tmp_path)
    assert run.worker_log("candidate", "segment0").name == "worker-candidate-segment0.log"
    assert run.worker_log("baseline").name == "worker-baseline.log"
    run.write_crash("CandidateCrash: out of memory", "Traceback ...")
    assert run.crash_headline() == "CandidateCrash: out of memory" and "Traceback" in (run.crash_text() or "")
    assert runs.profile_run_id().startswith(runs.PROFILE_PREFIX)
    assert RunPaths(tmp_path / "none").crash_text() is None
