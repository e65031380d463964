"""The study's typed plan and results: the recorded files of docs/data read as `StudyResults` (format 1, no
version key), a written file reads back equal, a newer format is refused, the summary is recomputed from the
pairs, and the plan is built from the engine's and the calibration's arguments in one class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dit_ar_contract.errors import Refused
from perf_suite.studies import FORMAT, NULL, OVERHEAD, StudyArm, StudyPair, StudyResults
from pytest_dit_ar.loop import study
from tests.helpers.loop import PROJECT

DATA = PROJECT / "docs" / "data"
STUDIES = ["h200/wave2/study-h200-1.json", "h200/wave3/study.json", "h200/wave4/call2/eager.json",
           "cpu/study-quiet.json", "cpu/sandbox-overhead.json"]


@pytest.mark.parametrize("name", STUDIES)
def test_recorded_studies_read_as_types_and_round_trip(name: str, tmp_path: Path) -> None:
    raw = json.loads((DATA / name).read_text())
    results = StudyResults.read(DATA / name)
    assert results.format == 1 and results.lane == raw["lane"]
    assert {a: len(arm.pairs) for a, arm in results.arms.items()} == {a: len(s) for a, s in raw["arms"].items()}
    for arm in results.speedup_arms():
        assert arm.delay_s == raw["delays_s"][arm.name] and arm.speedup_pct == float(arm.name)
    first = next(iter(results.arms.values())).pairs[0]
    assert list(first.cand_s) == raw["arms"][next(iter(raw["arms"]))][0]["cand_s"]
    again = StudyResults.read(results.write(tmp_path / "again.json"))
    assert again.arms == results.arms and again.format == FORMAT and again.stopped == results.stopped


def test_a_newer_format_and_a_file_that_is_no_study_are_refused() -> None:
    with pytest.raises(ValueError, match="format version 99 not supported"):
        StudyResults.from_dict({"format": 99, "lane": "x", "arms": {}})
    with pytest.raises(ValueError, match="not a study file"):
        StudyResults.from_dict({"lane": "x", "segments": []})


def test_the_summary_is_recomputed_from_a_recorded_file() -> None:
    results = StudyResults.read(DATA / "h200" / "wave3" / "study.json")
    raw = json.loads((DATA / "h200" / "wave3" / "study.json").read_text())["summary"]
    summary = study.summary_of(results, orders=50)
    for arm, row in summary.items():
        assert row.segments == raw[arm]["segments"]
        assert row.old.keeps == raw[arm]["old"]["keeps"] and row.new.keeps == raw[arm]["new"]["keeps"]
    assert summary[NULL].offset_bound_pct is not None and summary["10"].pooled.estimate_pct > 0


def test_an_arm_takes_off_its_injected_sleep() -> None:
    arm = StudyArm("10", (StudyPair((0.9, 0.9), (1.0, 1.0)),), delay_s=0.1)
    (cand, best), = arm.sleep_free()
    assert list(best) == pytest.approx([0.9, 0.9]) and list(cand) == [0.9, 0.9]
    assert StudyArm(OVERHEAD).speedup_pct is None and StudyArm(NULL).speedup_pct is None


def test_the_plan_comes_from_the_engine_and_the_calibration_arguments(tmp_path: Path) -> None:
    import argparse

    args = argparse.Namespace(config=tmp_path / "c.json", lane="embedded-cpu", null_segments=6, speedups="3,10",
                              segments_per_speedup=4, steps=8, rounds=16, old_rounds=16, pool=2, load=0,
                              cpu_affinity="2", deadline_s=85.0, unsandboxed=False, overhead_segments=3,
                              out=tmp_path / "o.json")
    plan = study.StudyPlan.from_args(args)
    assert plan.speedups == (3.0, 10.0) and plan.cpu_affinity == (2,) and plan.sandboxed
    assert plan.wanted() == {NULL: 6, "3": 4, "10": 4, OVERHEAD: 3}
    cal = study.StudyPlan.calibration(tmp_path / "c.json", "embedded-cpu", tmp_path, 8, 12, [5.0], None, 900.0,
                                      tmp_path / "o.json", sandboxed=False)
    assert cal.wanted() == {NULL: 8, "5": 2} and cal.deadline_s == 900.0 and cal.pool == 1 and cal.quiet
    with pytest.raises(Refused, match="between 0 and 90"):
        study.StudyPlan(tmp_path, speedups=(95.0,))
    with pytest.raises(Refused, match="--pool 0"):
        study.StudyPlan(tmp_path, pool=0)


def test_a_tree_already_slowed_can_be_slowed_again_for_a_speedup_arm() -> None:
    """The tests' project copies carry the sleep wrapper; the study's arm adds one of its own, not a recursion."""
    import time

    from pytest_dit_ar.loop.patching import sleep_patch

    source = ("def build_pipeline(spec):\n    class P:\n        def generate(self, r):\n            return r\n"
              "    return P()\n") + sleep_patch(0.0) + sleep_patch(0.02, tag="injected")
    ns: dict = {}
    exec(compile(source, "model_under_test/__init__.py", "exec"), ns)
    pipe = ns["build_pipeline"]({})
    t0 = time.perf_counter()
    assert pipe.generate([1]) == [1] and time.perf_counter() - t0 >= 0.02


def test_a_study_of_no_ops_alone_still_draws_its_keeps_and_rounds(tmp_path: Path) -> None:
    """The figure puts the no-op arm at a true speedup of 0 in both panels: the loaded no-op study of
    2026-12-03 (docs/data/cpu/study-loaded-wave9.json, run 1) has no speedup arm and drew two empty panels before."""
    results = StudyResults.read(DATA / "cpu" / "study-loaded-wave9.json")
    summary = study.summary_of(results, orders=50)
    assert list(summary) == [NULL] and summary[NULL].new.keeps == 0 and len(summary[NULL].new.experiments) == 21
    path = study.figure(summary, tmp_path / "noops.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
