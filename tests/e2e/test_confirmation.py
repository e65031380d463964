"""The session's best confirmed on fresh seeds, end to end on the embedded CPU lane: an approximate keep, then
`dit-ar summary` generates the original baseline's and the best's outputs of cases no candidate saw, tests them at
the best's class and says CONFIRMED (loop/quality/confirmation.py, state/confirmation.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_dit_ar.loop.speed.patching import wrap_build
from pytest_dit_ar.state import confirmation
from pytest_dit_ar.state.paths import StatePaths
from tests.helpers.loop import commit_change, experiment, git, last_line, run

CUT = "three quarters of the sampling steps"


@pytest.mark.extended
@pytest.mark.slow
def test_an_approximate_keep_is_confirmed_on_fresh_seeds_by_the_summary(loop_repo: Path) -> None:
    commit_change(loop_repo, "model_under_test/__init__.py", wrap_build("steps", """
return _build_steps(dict(spec, steps=spec["steps"] * 3 // 4))"""), CUT)
    proc = experiment(loop_repo, "approximate", CUT)
    assert last_line(proc) == "VERDICT: KEEP", proc.stdout[-4000:] + proc.stderr[-2000:]
    best = git(loop_repo, "rev-parse", "HEAD")
    plain = run(loop_repo, "summary", "--markdown", "--no-confirm")
    assert "**not confirmed (skipped)" in plain.stdout and "confirming the best" not in plain.stderr
    summary = run(loop_repo, "summary", "--markdown", timeout=1200)
    assert summary.returncode == 0, summary.stdout[-3000:] + summary.stderr[-3000:]
    assert "confirming the best" in summary.stderr and "fresh" in summary.stderr  # said on the terminal
    assert f"**CONFIRMED: best {best[:10]} (approximate) against the original baseline" in summary.stdout
    record = confirmation.read(StatePaths(loop_repo), "embedded-cpu")
    assert record is not None and record.confirmed and record.best_commit == best
    judge = next(t for t in record.tests if t.metric == "judge_accuracy")
    assert judge.passed and judge.last.n >= judge.rule.min_cases == 119 and record.cases == judge.last.n
    logs = loop_repo / ".autoresearch" / "runs" / record.run_id
    assert (logs / "worker-best-confirmation.log").is_file() and (logs / "worker-baseline-confirmation.log").is_file()
    again = run(loop_repo, "summary", "--markdown")  # stored: not run again
    assert "confirming the best" not in again.stderr and "**CONFIRMED: best" in again.stdout
