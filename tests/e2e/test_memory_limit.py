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


def test_a_fleet_judgings_workers_are_held_together_by_its_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers, each under its own limit, inside one judging's group: together they may not pass the judging's
    limit; the kernel kills one of them, and its death names both limits."""
    import subprocess
    import sys
    import time

    if cgroup.memory_limit_kind() == "RLIMIT_DATA":
        pytest.skip("no writable memory cgroup here")
    judging = cgroup.open_judging("judging-test", 320)
    assert judging is not None and judging.limit_mb == 320
    monkeypatch.setenv(cgroup.PARENT_VARIABLE, judging.name)
    hold = "import time; x = [bytes([i % 250 + 1]) * (16 << 20) for i in range(13)]; print('held', flush=True); " \
           "time.sleep(60)"  # 208 MiB each: under its own 256 MiB, two over the judging's 320 MiB
    workers, procs = [], []
    try:
        for _ in range(2):
            group = cgroup.open_group("w", 256)
            assert group is not None and group.memory is not None and group.memory.parent.name == judging.name
            workers.append(group)
            procs.append(subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE,
                                          preexec_fn=group.enter))
            procs[-1].stdout.readline()  # the first holds its blocks before the second starts
        deadline = time.monotonic() + 30
        while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        killed = [g for g, p in zip(workers, procs) if p.poll() is not None]
        assert len(killed) == 1 and -9 in [p.poll() for p in procs], [p.poll() for p in procs]
        note = cgroup.oom_note(killed[0])
        assert note.startswith("out of memory: the kernel killed it at its memory limit of 256 MiB"), note
        assert "its judging's workers: 320 MiB together" in note, note
    finally:
        for p in procs:
            p.kill()
        judging.remove()  # the workers' groups inside it go with it
    assert not judging.memory.exists()
