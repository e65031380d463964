"""`dit-ar calibrate` end to end on the embedded-cpu lane: real A/A worker pairs (the study engine) with a
tiny budget, the profile stored in .autoresearch/noise.json, the power lines printed and the figure written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.loop import make_project_copy, run

pytestmark = [pytest.mark.slow, pytest.mark.extended]  # 3 fresh worker pairs: about a minute on a busy 2-core VM


def test_calibrate_on_the_cpu_lane_stores_a_profile(tmp_path: Path) -> None:
    repo = make_project_copy(tmp_path / "repo", slow_s=0.0)
    run(repo, "init", "--tag", "cal", "--lane", "embedded-cpu", check=True)
    proc = run(repo, "calibrate", "--pairs", "3", "--rounds", "4", "--budget-s", "400", check=True, timeout=600)
    assert "A/A pairs x 4 rounds of embedded-cpu" in proc.stdout
    assert "a 5% win needs about" in proc.stdout or "a 5% win is not detected" in proc.stdout
    noise = json.loads((repo / ".autoresearch" / "noise.json").read_text())
    profile = next(iter(noise.values()))["profile"]
    assert profile["pairs"] == 3 and profile["rounds"] == 4 and profile["bound_pct"] > 0
    assert (repo / ".autoresearch" / "calibration-embedded-cpu.png").stat().st_size > 1000
    refused = run(repo, "calibrate", "--budget-s", "1")
    assert refused.returncode == 2 and "too little time for one pair" in refused.stderr
