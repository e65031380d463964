"""The red team's chains, rebuilt (extended tier: several whole experiments).

1. A keep K that is a real win (the project copy's 0.15 s sleep removed) and also sleeps 0.25 s whenever it can tell
   it is the best (tests/helpers/oracles.py tries every channel known), then two comment-only no-ops on it: the
   ratchet kept both at +51.5% and +62.4% when the best could read its side from its stderr's path. Neither no-op
   may be kept, and no worker of any run may have told its side.
2. A candidate that generates with one sampling step whenever it can tell it is timed (and so would pass the judged
   quality run and win every timed round): it must not be kept, and no channel the harness closes may tell its
   judged worker from its timed ones (the sandbox's history, shared by a fork server's children, is the named
   residual: the round check's denoiser rows catch a step cut there).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dit_ar_contract.status import Status
from pytest_dit_ar.loop.speed.patching import wrap_build, wrap_generate
from tests.helpers import oracles
from tests.helpers.loop import DELAY_LINE, commit_change, experiment, last_line, ledger_rows
from tests.helpers.sandbox_required import require_sandbox

pytestmark = [pytest.mark.slow, pytest.mark.extended]
ORACLE_IMPORT = "\n\nimport time as _role_time\n\nfrom . import oracle as _oracle\n"
SLOW_WHEN_BEST = ORACLE_IMPORT + wrap_generate("role", """
if _oracle.thinks_best():
    _role_time.sleep(0.25)
return _gen(requests)
""", setup="_oracle.report()")
FEWER_STEPS_WHEN_TIMED = ORACLE_IMPORT + wrap_build("timed", """
_oracle.report()
if _oracle.thinks_timed():
    spec = {**spec, "steps": 1}
return _build_timed(spec)
""")


def worker_reports(repo: Path, run_dir: str) -> dict[str, dict]:
    """Each worker's oracle report in a run folder, by its log's name."""
    found = {}
    for log in (repo / run_dir).glob("worker-*.log"):
        got = oracles.reports(log.read_text(encoding="utf-8", errors="replace"))
        if got:
            found[log.name] = got[-1]
    return found


def without_sleep(repo: Path) -> None:
    """The project copy's sleep before every generate set to 0 in the working tree (committed with the rest)."""
    init = repo / "model_under_test" / "__init__.py"
    lines = [f"{DELAY_LINE}0.0" if line.startswith(DELAY_LINE) else line for line in init.read_text().splitlines()]
    init.write_text("\n".join(lines) + "\n")


def test_a_keep_that_sleeps_in_one_role_ratchets_no_no_op(loop_repo: Path) -> None:
    require_sandbox()
    without_sleep(loop_repo)  # the real win
    (loop_repo / "model_under_test" / "oracle.py").write_text(oracles.ORACLE)
    commit_change(loop_repo, "model_under_test/__init__.py", SLOW_WHEN_BEST, "remove the sleep; and sleep as the best")
    keep = experiment(loop_repo, "exact", "a real win that sleeps whenever it is the best")
    assert last_line(keep) == "VERDICT: KEEP", keep.stdout[-3000:]
    for i in (1, 2):
        commit_change(loop_repo, "model_under_test/__init__.py", f"\n# no-op {i}\n", f"comment only {i}")
        noop = experiment(loop_repo, "exact", f"comment only {i}")
        assert last_line(noop) != "VERDICT: KEEP", noop.stdout[-3000:]
    rows = ledger_rows(loop_repo)
    assert [r.status for r in rows[-3:]][0] is Status.KEEP
    assert all(r.status is not Status.KEEP for r in rows[-2:])
    for row in rows[-3:]:
        reports = worker_reports(loop_repo, row.run_dir)
        assert reports, row.run_dir
        told = {name: r["best"] for name, r in reports.items() if any(r["best"].values())}  # the channels that told
        assert not told, (row.run_dir, told)  # no worker, of either side, could tell it was the best


def test_a_step_cutter_is_not_kept(loop_repo: Path) -> None:
    require_sandbox()
    (loop_repo / "model_under_test" / "oracle.py").write_text(oracles.ORACLE)
    commit_change(loop_repo, "model_under_test/__init__.py", FEWER_STEPS_WHEN_TIMED, "one step when timed")
    proc = experiment(loop_repo, "approximate", "fewer steps when it is timed")
    assert last_line(proc).startswith("VERDICT: ") and last_line(proc) != "VERDICT: KEEP", proc.stdout[-3000:]
    row = ledger_rows(loop_repo)[-1]
    reports = worker_reports(loop_repo, row.run_dir)
    judged = reports.get("worker-candidate-quality.log")
    assert judged is not None, sorted(reports)
    timed = {n: r for n, r in reports.items() if n.startswith("worker-candidate-segment")}
    for name, report in timed.items():  # what the judged worker saw, every timed one saw, but the named residual
        closed = {k: v for k, v in report["timed"].items() if k not in oracles.RESIDUAL}
        assert closed == {k: v for k, v in judged["timed"].items() if k not in oracles.RESIDUAL}, name
        assert report["judged"] == judged["judged"] and not any(report["judged"].values()), name
