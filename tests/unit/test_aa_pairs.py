"""What `dit-ar calibrate` collects (loop/speed/aa_pairs.py) and the file it writes: a study file reads back equal, a
newer format or a file that is no study is refused, the calibration's plan, and a tree already slowed by the
tests' sleep wrapper can be slowed again for a speedup arm."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dit_ar_contract.errors import Refused
from dit_ar_contract.sides import Sides
from perf_suite.studies import FORMAT, NULL, OVERHEAD, StudyArm, StudyPair, StudyResults
from pytest_dit_ar.loop.speed.aa_pairs import StudyPlan, slowed_copy
from pytest_dit_ar.loop.speed.patching import sleep_patch

MODEL = ("def build_pipeline(spec):\n    class P:\n        def generate(self, r):\n            return r\n"
         "    return P()\n")


def test_a_written_study_reads_back_equal(tmp_path: Path) -> None:
    pair = StudyPair((0.5, 0.51), (0.52, 0.5), Sides([0.7], []), Sides(1.5, 1.4), ("CB", "BC"), (), True,
                     Sides(0.2, None))
    results = StudyResults("embedded-cpu", "embedded-cpu", {"kind": "cpu"}, 8, 2, {"rounds": 2},
                           {NULL: StudyArm(NULL, (pair,)), "5": StudyArm("5", (pair,), 0.025)}, stopped="deadline")
    again = StudyResults.read(results.write(tmp_path / "study.json", {"written": "beside"}))
    assert again == results and again.format == FORMAT and again.null == (pair,)
    assert [a.name for a in again.speedup_arms()] == ["5"] and again.arms["5"].delay_s == 0.025
    assert StudyArm(OVERHEAD).speedup_pct is None and StudyArm(NULL).speedup_pct is None


def test_a_newer_format_and_a_file_that_is_no_study_are_refused() -> None:
    with pytest.raises(ValueError, match="format version 99 not supported"):
        StudyResults.from_dict({"format": 99, "lane": "x", "arms": {}})
    with pytest.raises(ValueError, match="not a study file"):
        StudyResults.from_dict({"lane": "x", "segments": []})


def test_the_calibration_plan(tmp_path: Path) -> None:
    cal = StudyPlan.calibration(tmp_path / "c.json", "embedded-cpu", tmp_path, 8, 12, [5.0], None, 900.0,
                                tmp_path / "o.json", sandboxed=False)
    assert cal.wanted() == {NULL: 8, "5": 2} and cal.deadline_s == 900.0 and cal.pool == 1 and cal.quiet
    assert cal.rounds == cal.old_rounds == 12 and cal.tree == tmp_path and not cal.sandboxed
    with pytest.raises(Refused, match="between 0 and 90"):
        StudyPlan(tmp_path, speedups=(95.0,))
    with pytest.raises(Refused, match="--pool 0"):
        StudyPlan(tmp_path, pool=0)
    with pytest.raises(Refused, match="at least one A/A pair"):
        StudyPlan(tmp_path, null_pairs=0)


def test_a_tree_already_slowed_can_be_slowed_again_for_a_speedup_arm(tmp_path: Path) -> None:
    """The tests' project copies carry the sleep wrapper; the speedup arm adds one of its own, not a recursion."""
    (tmp_path / "tree" / "model_under_test").mkdir(parents=True)
    (tmp_path / "tree" / "model_under_test" / "__init__.py").write_text(MODEL + sleep_patch(0.0))
    copy = slowed_copy(tmp_path / "tree", tmp_path / "slow", 0.02)
    ns: dict = {}
    source = (copy / "model_under_test" / "__init__.py").read_text()
    exec(compile(source, "model_under_test/__init__.py", "exec"), ns)
    pipe = ns["build_pipeline"]({})
    t0 = time.perf_counter()
    assert pipe.generate([1]) == [1] and time.perf_counter() - t0 >= 0.02
