"""`dit-ar revalidate`, `watch`, `summary --markdown` and the holdout, on a real session of the embedded CPU lane:
a keep (the injected sleep removed), then the chain timed again against the original baseline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.loop import last_line, ledger_rows, run, set_slow

SLOW_MACHINE_S = 1800  # a loaded 2-core machine: a keep and a re-validation each take minutes there


@pytest.mark.slow
@pytest.mark.extended
def test_revalidate_after_a_keep(loop_repo: Path) -> None:
    state = loop_repo / ".autoresearch"
    assert (state / "baseline" / "embedded-cpu" / "holdout").is_dir()  # generated at baseline time
    refused = run(loop_repo, "revalidate")
    assert refused.returncode == 2 and "still the original baseline" in refused.stderr, refused.stderr
    assert len(ledger_rows(loop_repo)) == 1  # a refused command changes nothing

    kept = set_slow(loop_repo, 0.0, "drop the sleep")
    proc = run(loop_repo, "experiment", "--classification", "exact", "--description", "drop the sleep",
               timeout=SLOW_MACHINE_S)
    assert last_line(proc) == "VERDICT: KEEP", proc.stdout[-3000:]
    best_before = json.loads((state / "best.json").read_text())

    proc = run(loop_repo, "revalidate", timeout=SLOW_MACHINE_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "re-validated" in proc.stdout and "holdout: passes" in proc.stdout, proc.stdout[-3000:]
    rows = ledger_rows(loop_repo)
    assert [r.status.word for r in rows] == ["baseline", "keep", "revalidate"]
    assert rows[-1].commit == kept
    assert json.loads((state / "best.json").read_text()) == best_before  # never moves the best
    record = json.loads((loop_repo / rows[-1].run_dir / "revalidate.json").read_text())
    assert record["measured"]["estimate_pct"] > 0 and record["product"] is not None
    assert record["holdout"]["cases"] == 10 and record["holdout"]["ok"] is True
    check = record["role_check"]  # the best against itself, side-blind: no role difference in an honest best
    assert check["commit"] == kept and check["why"] == "dit-ar revalidate" and check["role_dependent"] is False
    assert "side-blind A/A of the best" in proc.stdout
    roles = json.loads((state / "roles.json").read_text())["embedded-cpu"]
    assert roles["finding"] is None and roles["checks"][-1]["run_id"] == rows[-1].run_id

    status = run(loop_repo, "status", check=True).stdout
    assert "re-validation: re-validated" in status
    summary = run(loop_repo, "summary", "--markdown", check=True).stdout
    assert "### Chain from the original baseline to the best" in summary and kept[:10] in summary
    assert "measured cumulative speed-up" in summary and "holdout: passes 10/10" in summary
    watch = run(loop_repo, "watch", "--once", check=True).stdout
    assert "finished: REVALIDATED" in watch and "revalidate" in watch
    page = Path(run(loop_repo, "report", check=True).stdout.strip())
    assert 'href="summary.md"' in page.read_text() and (page.parent / "summary.md").is_file()
