"""`dit-ar profile` on a project copy (no session needed): stage attribution, FLOPs, roofline, trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.loop import make_project_copy, run

STAGES = ("text_encode", "denoise", "decode")

pytestmark = [pytest.mark.slow, pytest.mark.extended]  # a worker and the model: a minute each on a busy 2-core machine


@pytest.fixture(scope="module")
def profile_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_project_copy(tmp_path_factory.mktemp("profile") / "repo", slow_s=0.0)


def test_profile_json(profile_repo: Path) -> None:
    proc = run(profile_repo, "profile", "--json", "--batch", "2", "--repeats", "1", check=True)
    info = json.loads(proc.stdout)
    s = info["summary"]
    assert set(STAGES) <= set(s["stages_found"])
    assert all(s["stage_ms"][name] > 0 for name in STAGES)
    assert sum(s["stage_ms"][name] for name in STAGES) <= s["total_ms"] + 1e-6
    assert s["denoise_per_step_ms"] == pytest.approx(s["stage_ms"]["denoise"] / s["steps"])
    assert s["flops_per_batch"] > 0 and 0 < s["percent_of_peak"]
    assert s["peak"]["measured"] and s["peak"]["tflops"] > 0  # a CPU lane: the measured fallback
    assert 0 < len(s["top_ops"]) <= 15
    trace = json.loads(Path(info["trace"]).read_text())
    assert any(e.get("name") == "denoise" for e in trace["traceEvents"])
    assert json.loads(Path(info["json"]).read_text())["summary"] == s
    nsys = info["commands"]["nsys"]
    assert "profile --once" in nsys and "--capture-range=cudaProfilerApi" in nsys
    assert "regex:denoise/" in info["commands"]["ncu"]


def test_profile_once_runs_in_process(profile_repo: Path) -> None:
    proc = run(profile_repo, "profile", "--once", "--batch", "1", "--warmup", "1", check=True)
    assert "one generate of 1 on lane embedded-cpu" in proc.stdout
