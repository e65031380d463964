"""A candidate that holds more host memory than its worker's hard limit is killed inside its own group, and that is its
CRASH, named out of memory: the limit of worker/host_limit.py, enforced by the worker's cgroup (memory.max or
memory.limit_in_bytes) or, without one, by RLIMIT_DATA. The limit here is the derived one, made small by the
share a fleet's judge would set (`DIT_AR_MEMORY_SHARE`): about 1.5 GiB, and the hog asks for twice that.
The fleet's own test (one node, a hog in one slot, an honest judging in the other) is in test_fleet_invariants.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dit_ar_contract.status import Status
from pytest_dit_ar.loop.speed.patching import wrap_build
from pytest_dit_ar.state.runs import RunPaths
from pytest_dit_ar.worker import cgroup, host_limit
from tests.helpers.loop import commit_change, experiment, git, last_line, ledger_rows

pytestmark = pytest.mark.slow

LIMIT_MB = 1536.0


def hog(limit_mb: float) -> str:
    """A build that holds twice `limit_mb` in touched 64 MiB blocks (a zero-filled block would not be charged)."""
    blocks = int(2 * limit_mb / 64) + 1
    return wrap_build("hog", f"global _HELD\n_HELD = [bytes([i % 250 + 1]) * (64 << 20) for i in range({blocks})]\n"
                             "return _build_hog(spec)")


def share_for(limit_mb: float) -> str:
    return f"{limit_mb / (host_limit.machine_mb() * host_limit.HOST_MEMORY_SHARE):.6f}"


def crash_of(repo: Path) -> tuple[str, str]:
    parent = git(repo, "rev-parse", "HEAD")
    commit_change(repo, "model_under_test/__init__.py", hog(LIMIT_MB), "hold twice the limit")
    proc = experiment(repo, "exact", "a memory hog")
    assert last_line(proc) == "VERDICT: CRASH" and proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    row = ledger_rows(repo)[-1]
    assert row.status is Status.CRASH and git(repo, "rev-parse", "HEAD") == parent
    return row.reason, RunPaths(repo / row.run_dir).crash_text() or ""


def test_a_candidate_over_its_memory_limit_is_killed_in_its_own_group(loop_repo: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    if cgroup.memory_limit_kind() == "RLIMIT_DATA":
        pytest.skip("no writable memory cgroup here: the RLIMIT_DATA test below covers this machine")
    monkeypatch.setenv(host_limit.SHARE_VARIABLE, share_for(LIMIT_MB))
    reason, text = crash_of(loop_repo)
    assert "out of memory" in reason and f"memory limit of {LIMIT_MB:.0f} MiB" in reason, reason
    assert "oom_kill" in reason and "oom_kill" in text


@pytest.mark.extended
def test_without_a_memory_cgroup_rlimit_data_holds_the_limit(loop_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(host_limit.SHARE_VARIABLE, share_for(LIMIT_MB))
    monkeypatch.setenv(cgroup.DISABLE_VARIABLE, "1")
    reason, text = crash_of(loop_repo)
    assert "MemoryError" in reason + text, reason
