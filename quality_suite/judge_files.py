"""Where the digit judge's files are (light: no torch), for the checks `dit-ar doctor` runs."""

from __future__ import annotations

from pathlib import Path

JUDGE_DIR = Path(__file__).resolve().parent / "judge"  # the weights ship inside the judge package
WEIGHTS_NAME = "judge.safetensors"
STATS_NAME = "real_stats.safetensors"
