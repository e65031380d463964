"""`performance.time_quality_pair: "no"` (the default on GPU lanes): the quality run's two workers serve the quality
tests and are closed, and every timed pair, the first included, is forked fresh. Run on the CPU lane, where the
default is "yes", by setting it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.loop import experiment, last_line, ledger_rows, make_project_copy, run, set_slow

pytestmark = pytest.mark.slow


@pytest.mark.extended  # its own init and baseline, then a keep: about 3 minutes on the 2-core VM
def test_every_timed_pair_is_fresh_when_the_quality_pair_is_not_timed(tmp_path: Path) -> None:
    repo = make_project_copy(tmp_path / "repo", perf={"time_quality_pair": "no"})
    run(repo, "init", "--tag", "fresh1", "--lane", "embedded-cpu", check=True)
    run(repo, "baseline", "--quiet", check=True)
    set_slow(repo, 0.0, "remove the avoidable delay")
    proc = experiment(repo, "exact", "remove the avoidable delay")
    assert last_line(proc) == "VERDICT: KEEP", proc.stdout + proc.stderr
    run_dir = repo / ledger_rows(repo)[-1].run_dir
    perf = json.loads((run_dir / "perf.json").read_text())
    assert perf["segments"] and all(segment["fresh"] for segment in perf["segments"])
    phases = json.loads((run_dir / "experiment.json").read_text())["phases"]
    assert phases["warmup_reused"] == 0  # no quality generate counts as a fresh pair's warm-up
