"""The lab's demo tools: the patch maker writes exactly the committed demo patches, and the repeat tool reads
each candidate's verdict from a demo's output and compares it with the documented one."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.tools import demo_repeat as tool
from lab.tools import make_demo_patches as maker
from pytest_dit_ar.cli.demo import DOCUMENTED, candidates

CANDIDATES = candidates()


def test_the_committed_patches_are_what_the_maker_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """lab/tools/make_demo_patches.py regenerates exactly the committed files (nothing edited by hand)."""
    monkeypatch.setattr(maker, "OUT", tmp_path)
    maker.main()
    made = {p.name: p.read_text() for p in tmp_path.glob("*.patch")}
    committed = {c.patch.name: c.patch.read_text() for c in CANDIDATES}
    assert made.keys() == committed.keys()
    strip = lambda t: [ln for ln in t.splitlines() if not ln.startswith("index ")]  # noqa: E731 - blob ids vary
    assert all(strip(made[k]) == strip(committed[k]) for k in made)


def test_demo_repeat_reads_each_candidates_verdict_from_a_demos_output() -> None:
    output = "\n".join([
        "[ 589s] candidate 1/4: batched guidance (declared exact) — expected KEEP", "    speed: +83.48% ...",
        "    VERDICT: KEEP", "[1088s] candidate 2/4: half steps (declared approximate)",
        "      [1100s] quality: metrics", "    VERDICT: KEEP", "[2154s] candidate 3/4: int8 (declared numerical)",
        "    quality test: judge_accuracy vs baseline: degradation +0.0037 [upper bound +0.0061] vs resolution "
        "3.47e-05 over 40 cases: FAIL", "    VERDICT: DISCARD-QUALITY"])
    verdicts = tool.verdicts_in(output, 4)
    assert verdicts == ["KEEP", "KEEP", "DISCARD-QUALITY", "?"]
    assert tool.quality_tests_in(output) == {3: ["judge_accuracy vs baseline: degradation +0.0037 [upper bound "
                                                 "+0.0061] vs resolution 3.47e-05 over 40 cases: FAIL"]}
    expected = [DOCUMENTED[c.patch.stem] for c in CANDIDATES]
    run = tool.DemoRun(1, 100.0, 1.0, 0, ["KEEP", "KEEP", "DISCARD-QUALITY", "DISCARD-PERFORMANCE"])
    assert run.as_documented(expected)
    run.verdicts[2] = "DISCARD-PERFORMANCE"  # the int8 candidate is documented as refused on quality only
    assert not run.as_documented(expected)
