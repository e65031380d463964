"""`dit-ar calibrate` end to end on the embedded-cpu lane: real A/A worker pairs (loop/speed/aa_pairs.py) with a
tiny budget, the profile stored in .autoresearch/noise.json, the power lines printed and the figure written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perf_suite.studies import StudyResults
from tests.helpers.loop import env_for, make_project_copy, run

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


def test_the_study_engine_builds_a_pool_of_forked_pairs(tmp_path: Path) -> None:
    """A pool of 2 forks two pairs before building them. A forked worker's freeze stops its whole side, so the
    first pair's freeze used to stop the second pair's children before their hello: the engine waited 300 s
    and crashed (found rehearsing lab/device/calibrate.sh, 2026-12-02)."""
    repo = make_project_copy(tmp_path / "repo", slow_s=0.0)
    out = tmp_path / "study.json"
    engine = ("import sys; from pathlib import Path; "
              "from pytest_dit_ar.loop.speed.aa_pairs import StudyPlan, run_study; "
              "run_study(StudyPlan(Path('config/autoresearch.json'), 'embedded-cpu', null_pairs=2, speedups=(3.0,), "
              "pairs_per_speedup=1, rounds=4, old_rounds=4, pool=2, out=Path(sys.argv[1])))")
    proc = subprocess.run([sys.executable, "-c", engine, str(out)], cwd=repo, env=env_for(repo), capture_output=True,
                          text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = StudyResults.read(out)
    assert len(results.null) == 2 and len(results.arms["3"].pairs) == 1 and results.stopped is None
    assert all(p.forked for p in results.null)  # the pool came from the fork servers
