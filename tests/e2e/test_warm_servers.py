"""Warm fork servers (`performance.warm_servers`): the baseline starts a fork server per side, detached; the next
experiment adopts them (every check passed) and forks its quality run's pair from them; it starts the next ones at
its end; a keeper that died is refused and the experiment runs as without them, saying why. The phases of both
no-ops are printed for the notebook, never asserted (timings on a shared machine)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dit_ar_contract.status import Status
from pytest_dit_ar.loop.speed import warm_servers
from pytest_dit_ar.state.paths import StatePaths
from pytest_dit_ar.worker import warm
from tests.helpers.loop import commit_change, experiment, ledger_rows, make_project_copy, run
from tests.helpers.sandbox_required import require_sandbox

pytestmark = pytest.mark.slow


def record(repo: Path) -> dict:
    return json.loads((repo / ledger_rows(repo)[-1].run_dir / "experiment.json").read_text())


def ready(repo: Path, timeout_s: float = 300.0) -> warm.WarmRecord:
    """The warm servers' record once both said hello (their keeper imports in the background)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rec = warm_servers.read(StatePaths(repo))
        if rec is not None and rec.servers:
            return rec
        time.sleep(0.5)
    log = (repo / ".autoresearch" / "warm" / "keeper.log").read_text()
    raise AssertionError(f"no warm servers within {timeout_s} s: {log}")


def test_proc_shows_a_process_s_child() -> None:
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, time; p = subprocess.Popen(['sleep', '30']); "
                               "time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while not warm.children_of(parent.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(warm.children_of(parent.pid)) == 1
    finally:
        for pid in warm.children_of(parent.pid):
            os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()


@pytest.mark.extended  # a baseline and two experiments: about 4 minutes on the 2-core VM
@pytest.mark.parametrize("early", [True, False], ids=["keeper-beside-the-quality-run", "keeper-after-the-timing"])
def test_a_no_op_forks_its_quality_pair_from_the_servers_the_baseline_started(tmp_path: Path, early: bool) -> None:
    require_sandbox()
    repo = make_project_copy(tmp_path / "repo", perf={"warm_servers": True, "warm_timing_servers": True,
                                                      "warm_servers_early": early})
    run(repo, "init", "--tag", "w1", "--lane", "embedded-cpu", check=True)
    run(repo, "baseline", "--quiet", check=True)
    first = ready(repo)
    assert [(s.slot, s.side) for s in first.servers] == [
        ("first-candidate", "candidate"), ("quality-candidate", "candidate"), ("quality-best", "best"),
        ("timing-candidate-0", "candidate"), ("timing-best-0", "best")]  # the timing's too (a CUDA lane's default)
    assert "warm servers: ready since" in run(repo, "status", check=True).stdout

    commit_change(repo, "model_under_test/__init__.py", "\n# a comment: nothing changes\n", "a no-op")
    proc = experiment(repo, "exact", "a no-op")
    ended = time.time()
    assert ledger_rows(repo)[-1].status is Status.DISCARD_PERFORMANCE, proc.stdout + proc.stderr
    warm_run = record(repo)
    assert warm_run["warm_servers"].startswith("adopted ("), warm_run["warm_servers"]
    assert f"quality-candidate pid {first.servers[1].host_pid}" in warm_run["warm_servers"]
    assert "first worker forked from a server of its own" in warm_run["warm_servers"]  # the no-op is a new tree
    assert "warm servers: adopted" in proc.stdout
    run_dir = repo / ledger_rows(repo)[-1].run_dir
    assert (run_dir / "worker-candidate-quality.log").exists() and (run_dir / "worker-candidate-first.log").exists()
    pool = json.loads((run_dir / "perf.json").read_text())["pool"]
    assert pool["fork_servers"] and not list(run_dir.glob("forkserver-*.log"))  # the timing forked from adopted ones

    second = ready(repo)  # the experiment started the next ones (beside its quality run, or at its end)
    assert second.keeper_pid != first.keeper_pid
    waited = "the next experiment's servers were ready after a wait of"
    assert (waited in warm_run["warm_servers"]) is early, warm_run["warm_servers"]  # ready before its timing
    assert not early or second.started < ended  # said hello while the experiment still ran
    os.kill(second.keeper_pid, signal.SIGKILL)  # a keeper that dies takes its sandboxes with it
    commit_change(repo, "model_under_test/__init__.py", "\n# another comment\n", "another no-op")
    proc = experiment(repo, "exact", "another no-op")
    assert ledger_rows(repo)[-1].status is Status.DISCARD_PERFORMANCE, proc.stdout + proc.stderr
    cold_run = record(repo)
    assert cold_run["warm_servers"].startswith(f"not adopted: their keeper (pid {second.keeper_pid}) is gone")
    print("\nwith warm servers:", json.dumps(warm_run["phases"]))
    print("without (exec'd):", json.dumps(cold_run["phases"]))
    warm_servers.stop(StatePaths(repo))
