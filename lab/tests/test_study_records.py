"""The recorded studies of lab/data and the measured study's evaluation: the files read as `StudyResults`
(format 1, no version key) and a written file reads back equal, the summary is recomputed from the pairs, the
simulation takes an arm's injected sleep off, and the plan comes from the study's command line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from dit_ar_contract.errors import EXIT_REFUSED
from lab.studies import measured_study
from lab.studies.simulation import LAB_DATA, sleep_free
from perf_suite.studies import FORMAT, NULL, OVERHEAD, StudyArm, StudyPair, StudyResults

STUDIES = ["h200/study-eager-20261130/study-h200-1.json", "h200/sequential-rerun-20261201/study.json",
           "h200/warm-start-ladder-20261201/call2/eager.json", "cpu/study-quiet.json", "cpu/sandbox-overhead.json"]


@pytest.mark.parametrize("name", STUDIES)
def test_recorded_studies_read_as_types_and_round_trip(name: str, tmp_path: Path) -> None:
    raw = json.loads((LAB_DATA / name).read_text())
    results = StudyResults.read(LAB_DATA / name)
    assert results.format == 1 and results.lane == raw["lane"]
    assert {a: len(arm.pairs) for a, arm in results.arms.items()} == {a: len(s) for a, s in raw["arms"].items()}
    for arm in results.speedup_arms():
        assert arm.delay_s == raw["delays_s"][arm.name] and arm.speedup_pct == float(arm.name)
    first = next(iter(results.arms.values())).pairs[0]
    assert list(first.cand_s) == raw["arms"][next(iter(raw["arms"]))][0]["cand_s"]
    again = StudyResults.read(results.write(tmp_path / "again.json"))
    assert again.arms == results.arms and again.format == FORMAT and again.stopped == results.stopped


def test_the_summary_is_recomputed_from_a_recorded_file() -> None:
    results = StudyResults.read(LAB_DATA / "h200" / "sequential-rerun-20261201" / "study.json")
    raw = json.loads((LAB_DATA / "h200" / "sequential-rerun-20261201" / "study.json").read_text())["summary"]
    summary = measured_study.summary_of(results, orders=50)
    for arm, row in summary.items():
        assert row.segments == raw[arm]["segments"]
        assert row.old.keeps == raw[arm]["old"]["keeps"] and row.new.keeps == raw[arm]["new"]["keeps"]
    assert summary[NULL].offset_bound_pct is not None and summary["10"].pooled.estimate_pct > 0
    assert measured_study.summary_dict(results)["10"]["new"]["keeps"] == summary["10"].new.keeps


def test_an_arm_takes_off_its_injected_sleep() -> None:
    arm = StudyArm("10", (StudyPair((0.9, 0.9), (1.0, 1.0)),), delay_s=0.1)
    (cand, best), = sleep_free(arm)
    assert list(best) == pytest.approx([0.9, 0.9]) and list(cand) == [0.9, 0.9]


def test_the_plan_comes_from_the_study_command_line(tmp_path: Path) -> None:
    args = argparse.Namespace(config=tmp_path / "c.json", lane="embedded-cpu", null_segments=6, speedups="3,10",
                              segments_per_speedup=4, steps=8, rounds=16, old_rounds=16, pool=2, load=0,
                              cpu_affinity="2", deadline_s=85.0, unsandboxed=False, overhead_segments=3,
                              out=tmp_path / "o.json")
    plan = measured_study.plan_from_args(args)
    assert plan.speedups == (3.0, 10.0) and plan.cpu_affinity == (2,) and plan.sandboxed
    assert plan.wanted() == {NULL: 6, "3": 4, "10": 4, OVERHEAD: 3}
    assert plan.out == tmp_path / "o.json" and plan.deadline_s == 85.0 and not plan.quiet


def test_the_command_line_refuses_a_bad_plan_before_any_worker_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert measured_study.main(["--lane", "embedded-cpu", "--speedups", "95"]) == EXIT_REFUSED
    assert "between 0 and 90 percent" in capsys.readouterr().err
    assert measured_study.main(["--lane", "embedded-cpu", "--speedups", "3,x"]) == EXIT_REFUSED
    assert "--speedups" in capsys.readouterr().err


def test_a_study_of_no_ops_alone_still_draws_its_keeps_and_rounds(tmp_path: Path) -> None:
    """The figure puts the no-op arm at a true speedup of 0 in both panels: the loaded no-op study of
    2026-12-03 (lab/data/cpu/study-loaded-20261203a.json, run 1) has no speedup arm and drew two empty panels before."""
    results = StudyResults.read(LAB_DATA / "cpu" / "study-loaded-20261203a.json")
    summary = measured_study.summary_of(results, orders=50)
    assert list(summary) == [NULL] and summary[NULL].new.keeps == 0 and len(summary[NULL].new.experiments) == 21
    path = measured_study.figure(summary, tmp_path / "noops.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
