"""The side-blind A/A of the best (loop/speed/role_check.py), end to end on the embedded CPU lane: drawn in an
experiment (the lane's `role_check_fraction` set to 1), it finds no role difference in an honest best and is
recorded; a best that runs slower in the best's role (what a best that could tell its role would do: here its
checkout in the best's role gets a sleep, since no worker can tell) is marked role-dependent after two A/As, every
experiment is then refused with a line naming the keep and the way back, and `dit-ar recover --before` takes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_dit_ar.loop.speed import role_check
from pytest_dit_ar.loop.speed.patching import sleep_patch
from pytest_dit_ar.loop.workers.launch import launcher_for
from pytest_dit_ar.state import runs
from pytest_dit_ar.state.roles import read_roles
from pytest_dit_ar.state.session import open_session
from tests.helpers.loop import (
    DELAY_LINE,
    commit_change,
    experiment,
    git,
    last_line,
    ledger_rows,
    make_project_copy,
    run,
)
from tests.helpers.sandbox_required import require_sandbox

pytestmark = [pytest.mark.slow, pytest.mark.extended]


def test_a_role_dependent_best_is_marked_refused_and_rewound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_sandbox()
    # a large sleep to remove, and a large one in the best's role: each plain to see on a loaded 2-core machine
    repo = make_project_copy(tmp_path / "repo", slow_s=0.6, perf={"role_check_fraction": 1.0})
    run(repo, "init", "--tag", "t1", "--lane", "embedded-cpu", check=True)
    run(repo, "baseline", "--quiet", check=True)
    origin = git(repo, "rev-parse", "HEAD")
    init = repo / "model_under_test" / "__init__.py"
    init.write_text("\n".join(f"{DELAY_LINE}0.0" if line.startswith(DELAY_LINE) else line
                              for line in init.read_text().splitlines()) + "\n")
    keep = commit_change(repo, "model_under_test/__init__.py", "\n# the sleep removed\n", "remove the sleep")
    proc = experiment(repo, "exact", "remove the sleep")
    assert last_line(proc) == "VERDICT: KEEP", proc.stdout[-3000:]
    record = runs.read_experiment(repo / ledger_rows(repo)[-1].run_dir)
    assert record.role_check is not None and not record.role_check.role_dependent  # drawn: the baseline is honest
    why = record.role_check.why  # drawn, unless the best's timing as the best already called for it
    assert (why.startswith("drawn") or "slower as the best" in why) and "side-blind A/A of the best" in proc.stdout

    session = open_session(repo / "config" / "autoresearch.json")
    real_sync = role_check.gitops.sync_worktree

    def slowed_in_the_best_role(git_repo, path: Path, sha: str) -> None:  # noqa: ANN001 - a git.Repo
        real_sync(git_repo, path, sha)
        if path == session.paths.best_worktree:
            target = path / "model_under_test" / "__init__.py"
            target.write_text(target.read_text() + sleep_patch(0.6, tag="role"))

    monkeypatch.setattr(role_check.gitops, "sync_worktree", slowed_in_the_best_role)
    best = session.best()
    assert best is not None and best.commit == keep
    check = role_check.judge_best(session, launcher_for(session), session.paths.run("role-test"), best, "test")
    assert check.role_dependent and check.attempts == 2 and check.estimate_pct > 0, check
    monkeypatch.undo()
    finding = read_roles(session.paths, session.lane_id).finding
    assert finding is not None and finding.introduced_by == keep and finding.back_to == origin

    commit_change(repo, "model_under_test/__init__.py", "\n# no-op\n", "comment only")
    refused = experiment(repo, "exact", "comment only")
    assert refused.returncode == 2, refused.stdout[-2000:]
    said = refused.stdout + refused.stderr
    assert "role-dependent" in said and keep[:10] in said and f"dit-ar recover --before {keep[:10]}" in said
    assert f"ROLE-DEPENDENT best: the best {keep[:10]}" in run(repo, "status", check=True).stdout
    moved = run(repo, "recover", "--before", keep[:10], check=True)
    assert origin[:10] in moved.stdout
    assert git(repo, "rev-parse", "HEAD") == origin
    assert open_session(repo / "config" / "autoresearch.json").best().commit == origin
    assert read_roles(session.paths, session.lane_id).finding is None
    assert "ROLE-DEPENDENT" not in run(repo, "status", check=True).stdout
