"""A second experiment reuses what the best already produced: a keep stores its corpus outputs and judging as the
best's (signed with the session's secret), and the next candidate whose outputs are the best's bit for bit gets
that judging instead of the metrics again; its first warm-up counts the quality run's generates. Every experiment
records where its wall time went, by phase, and `dit-ar summary --time` shows it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dit_ar_contract.status import Status
from pytest_dit_ar.state.phases import PhaseTimes
from tests.helpers.loop import commit_change, experiment, last_line, ledger_rows, run, set_slow

pytestmark = pytest.mark.slow


def record(repo: Path) -> dict:
    return json.loads((repo / ledger_rows(repo)[-1].run_dir / "experiment.json").read_text())


@pytest.mark.extended  # two experiments: about 2 minutes on the 2-core VM
def test_a_no_op_after_a_keep_reuses_the_best_s_judging(loop_repo: Path) -> None:
    set_slow(loop_repo, 0.0, "remove the avoidable delay")
    proc = experiment(loop_repo, "exact", "remove the avoidable delay")
    assert last_line(proc) == "VERDICT: KEEP", proc.stdout + proc.stderr
    kept = record(loop_repo)
    assert kept["phases"]["judging_reused"] is False and "no stored outputs" in kept["reuse"]
    assert kept["phases"]["warmup_reused"] > 0  # the quality run's generates counted toward the first warm-up
    stored = sorted(p.name for p in (loop_repo / ".autoresearch" / "best-outputs").iterdir())
    assert len(stored) == 2 and stored[0].endswith(".json") and stored[1].endswith(".pt")

    commit_change(loop_repo, "model_under_test/__init__.py", "\n# a comment: nothing changes\n", "a no-op")
    proc = experiment(loop_repo, "exact", "a no-op")
    assert ledger_rows(loop_repo)[-1].status is Status.DISCARD_PERFORMANCE, proc.stdout + proc.stderr
    noop = record(loop_repo)
    assert noop["phases"]["judging_reused"] is True and "bit for bit" in noop["reuse"], noop["reuse"]
    assert "reuse: the outputs are the best's bit for bit" in proc.stdout
    assert sum(noop["phases"][p] for p in PhaseTimes.PHASES) == pytest.approx(noop["phases"]["total"])
    assert noop["phases"]["harness"] > 0  # the guards before and after the run, named
    text = run(loop_repo, "summary", "--markdown", "--time", check=True).stdout
    assert "### Where the time went" in text and "| discard-performance |" in text
