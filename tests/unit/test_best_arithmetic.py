"""The best's arithmetic in the summary and the report: achieved TFLOP/s and the share of the card's measured peak,
read from a `dit-ar profile` of the best commit itself (state/runs.py: arithmetic_of)."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_dit_ar.state import runs

LANE = "dit-xl2-256@nvidia-h100-80gb-hbm3"


def profile(folder: Path, commit: str, achieved: float, share: float, lane: str = LANE) -> None:
    folder.mkdir(parents=True)
    (folder / runs.PROFILE_RECORD).write_text(json.dumps({
        "lane_id": lane, "commit": commit,
        "summary": {"achieved_tflops": achieved, "percent_of_peak": share, "flops_method": "replica",
                    "peak": {"tflops": 792.0, "source": "measured: 8192^3 bfloat16 matmul", "measured": True}}}))


def test_the_best_s_own_profile_gives_its_arithmetic_and_another_commit_s_does_not(tmp_path: Path) -> None:
    profile(tmp_path / "profile-20261207-010000-1", "aaaaaaaaaa", 100.0, 12.6)
    profile(tmp_path / "profile-20261207-020000-2", "bbbbbbbbbb", 193.0, 24.4)
    found = runs.arithmetic_of(tmp_path, LANE, "aaaaaaaaaa" + "0" * 30)
    assert found is not None and found.achieved_tflops == 100.0 and found.percent_of_peak == 12.6
    assert found.line() == ("100.0 TFLOP/s achieved, 12.6% of the card's 792 TFLOP/s (measured: 8192^3 bfloat16 "
                            "matmul); FLOPs counted on a replica (`dit-ar profile` of aaaaaaaaaa)")
    assert runs.arithmetic_of(tmp_path, LANE, "cccccccccc" + "0" * 30) is None  # no profile of this best
    assert runs.arithmetic_of(tmp_path, "embedded-cpu@cpu", "bbbbbbbbbb" + "0" * 30) is None  # another lane's
