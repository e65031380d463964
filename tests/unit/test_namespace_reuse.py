"""A sandbox's processes are found by its PID namespace's inode number, which the kernel reuses once the namespace
is freed: a look after the sandbox is gone must never find (and so never kill or freeze) a newer sandbox's processes,
another session's included (worker/sandbox.py `Namespace`)."""

from __future__ import annotations

import pytest

from pytest_dit_ar.worker import sandbox

INIT, START = 100, 5000


@pytest.fixture
def proc(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - the fake /proc the test fills
    table: dict[int, tuple[str, int, int]] = {}  # pid -> (state, start ticks, inner pid)
    members: list[int] = []
    monkeypatch.setattr(sandbox, "_namespace_members", lambda ns: list(members))
    monkeypatch.setattr(sandbox, "_state_and_start", lambda pid: table[pid][:2] if pid in table else None)
    monkeypatch.setattr(sandbox, "_inner_pid", lambda pid: table[pid][2] if pid in table else None)
    monkeypatch.setattr(sandbox.os, "readlink", lambda path: "pid:[7]")
    killed: list[int] = []
    monkeypatch.setattr(sandbox.os, "kill", lambda pid, sig: killed.append(pid))
    return table, members, killed


def test_a_live_sandbox_finds_its_processes(proc) -> None:
    table, members, killed = proc
    table.update({INIT: ("S", START, 1), 101: ("R", START + 1, 2)})
    members[:] = [INIT, 101]
    ns = sandbox.Namespace(INIT, 7)
    assert ns.init_start == START and ns.alive() and ns.pids() == [INIT, 101]
    ns.kill()
    assert killed == [INIT, 101]


def test_after_its_init_ended_only_its_own_dying_processes_are_found(proc) -> None:
    table, members, killed = proc
    table.update({INIT: ("S", START, 1), 101: ("R", START + 1, 2)})
    ns = sandbox.Namespace(INIT, 7)
    table[INIT] = ("Z", START, 1)  # the init exited, not reaped yet; the kernel killed the rest, still dying
    members[:] = [INIT, 101]
    assert not ns.alive() and ns.pids() == [INIT, 101]
    del table[INIT]
    members[:] = [101]
    assert ns.pids() == [101]


def test_a_newer_sandbox_with_the_same_namespace_number_is_never_found(proc) -> None:
    table, members, killed = proc
    table[INIT] = ("S", START, 1)
    ns = sandbox.Namespace(INIT, 7)
    del table[INIT]  # the sandbox is gone and its namespace freed; another session's sandbox gets number 7
    table.update({300: ("S", START + 900, 1), 301: ("R", START + 901, 2)})
    members[:] = [300, 301]
    assert ns.pids() == [] and ns.own_pids() == {INIT}
    ns.kill()
    assert killed == []  # nothing of the other sandbox is signalled
    table[INIT] = ("S", START + 950, 1)  # even the init's PID reused as that sandbox's init
    members[:] = [INIT, 301]
    assert ns.pids() == []
