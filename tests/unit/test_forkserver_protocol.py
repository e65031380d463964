"""The fork server's protocol on the harness side, against a fake zygote in a thread (no subprocess):
a fork request carries the new worker's stdin, stdout and log descriptors; the harness keeps only its
own ends, and the forked worker then speaks the ordinary worker protocol over them."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from dit_ar_contract.device import LaneTarget
from pytest_dit_ar.worker import protocol, zygote
from pytest_dit_ar.worker.forkserver import SideZygotes, Zygote, host_pid


def target() -> LaneTarget:
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(LaneTarget)}
    values = {name: None for name in fields}
    values.update(device="cpu", env={}, memory_cap_gb=None)
    return LaneTarget(**values)  # type: ignore[arg-type]


def fake_zygote(sock: socket.socket, seen: dict) -> None:
    """Answer one fork like worker/zygote.py's parent, then act as the child on the received descriptors."""
    data, fds, _, _ = socket.recv_fds(sock, zygote.MAX_MESSAGE, 3)
    seen["request"], seen["fds"] = json.loads(data), len(fds)
    zygote.send(sock, {"ok": True, "pid": os.getpid()})
    stdin, stdout, log = fds
    os.write(log, b"child log line\n")
    os.write(stdout, protocol.encode({"ok": True, "protocol": protocol.VERSION, "pid": os.getpid(),
                                      "identity": {"kind": "cpu", "name": "fake"}, "prelude_s": 0.01}))
    line = b""
    while not line.endswith(b"\n"):
        line += os.read(stdin, 1)
    seen["op"] = protocol.decode(line)["op"]
    os.write(stdout, protocol.encode({"ok": True, "answer": 42}))
    for fd in fds:
        os.close(fd)


@pytest.fixture
def zygote_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # the fake child is this very process: no cgroup of its own, no freeze between requests (it would stop
    # the test) and no memory sampler (its reads of /proc would move the descriptor count checked below)
    from pytest_dit_ar.worker import forkserver, memory

    monkeypatch.setattr(forkserver.cgroup, "open_group", lambda label, memory_max_mb=None: None)
    monkeypatch.setattr(forkserver.ForkedWorker, "freeze", lambda self: None)
    monkeypatch.setattr(memory.MemoryWatch, "start", lambda self: None)
    z = Zygote("candidate", tmp_path, target(), 1, tmp_path / "fs.log", 30.0, None)
    harness, fake = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    z._sock, z.host_pid, z.inner_pid = harness, os.getpid(), os.getpid()  # noqa: SLF001 - as handshake sets them
    yield z, fake
    harness.close()
    fake.close()


def test_a_fork_passes_three_descriptors_and_the_worker_speaks_the_protocol(zygote_pair, tmp_path: Path) -> None:
    z, fake = zygote_pair
    seen: dict = {}
    before = len(os.listdir("/proc/self/fd"))
    thread = threading.Thread(target=fake_zygote, args=(fake, seen))
    thread.start()
    worker = z.fork(tmp_path / "worker.log")
    worker.handshake()
    assert seen["request"] == {"op": "fork"} and seen["fds"] == 3
    assert worker.identity == {"kind": "cpu", "name": "fake"} and worker.ready_s is not None
    assert worker.request("peak") == {"ok": True, "answer": 42} and seen["op"] == "peak"
    thread.join(5)
    worker.relay.join(5)  # the child closed its end: the relay has written everything and ends
    assert (tmp_path / "worker.log").read_text() == "child log line\n"
    # the harness kept its two pipe ends and a pidfd; the child's ends and the log pipe's went to the zygote
    assert len(os.listdir("/proc/self/fd")) - before == 3
    assert worker.scratch == z.scratch and z.forks == 1


def test_a_refused_fork_is_a_crash_and_leaks_nothing(zygote_pair, tmp_path: Path) -> None:
    from dit_ar_contract.errors import CandidateCrash

    z, fake = zygote_pair

    def refuse() -> None:
        _, fds, _, _ = socket.recv_fds(fake, zygote.MAX_MESSAGE, 3)
        for fd in fds:
            os.close(fd)
        zygote.send(fake, {"ok": False, "error": "no"})

    thread = threading.Thread(target=refuse)
    before = len(os.listdir("/proc/self/fd"))
    thread.start()
    with pytest.raises(CandidateCrash, match="could not fork: no"):
        z.fork(tmp_path / "w.log")
    thread.join(5)
    assert len(os.listdir("/proc/self/fd")) == before


def test_forks_are_dealt_round_robin_over_a_sides_fork_servers(tmp_path: Path) -> None:
    from pytest_dit_ar.worker.client import WorkerLauncher

    side = SideZygotes(WorkerLauncher(target(), 1, 30.0), "best", tmp_path, tmp_path, count=3)
    picked = []
    for z in side.zygotes:
        z.fork = lambda log, z=z: picked.append(z) or types_namespace()  # type: ignore[method-assign]
    for i in range(7):
        side.fork(f"p{i}")
    assert picked == [side.zygotes[i % 3] for i in range(7)]
    with pytest.raises(ValueError):
        SideZygotes(WorkerLauncher(target(), 1, 30.0), "best", tmp_path, tmp_path, count=0)


def types_namespace():
    import types

    return types.SimpleNamespace(pid=-1)


def test_host_pid_reads_the_innermost_pid() -> None:
    me = os.getpid()
    assert host_pid([me], me) == me
    assert host_pid([me], -5) is None


def test_the_fork_servers_environment_keeps_cuda_uninitialised(tmp_path: Path) -> None:
    z = Zygote("best", tmp_path, target(), 1, tmp_path / "fs.log", 30.0, None)
    assert z.environment()["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1"
    assert z.environment()["TORCHINDUCTOR_COMPILE_THREADS"] == "1"  # no compile pool beside timed rounds
    code = [line.split("#")[0] for line in Path(zygote.__file__).read_text().split('"""', 2)[2].splitlines()]
    touching = [line for line in code if "cuda" in line and "is_initialized()" not in line]
    assert not touching  # past the docstring, CUDA is only asked whether it was initialised (it must not be)


def test_a_sides_fork_servers_and_their_children_use_the_trees_compile_cache(tmp_path: Path) -> None:
    """The zygotes get the launcher's compile caches (so the quality worker's compiled kernels reach the
    forked timing workers), and a child starts warm when a worker of the tree ran before the zygote opened
    the folder, or once an earlier child of the same zygote compiled into it."""
    from pytest_dit_ar.worker.client import WorkerLauncher
    from pytest_dit_ar.worker.compile_cache import CompileCaches

    caches = CompileCaches(tmp_path / "caches")
    side = SideZygotes(WorkerLauncher(target(), 1, 30.0, None, caches, ("model/",)), "cand", tmp_path, tmp_path)
    z = side.zygotes[0]
    assert z.caches is caches and z.mutable == ("model/",)
    assert z.child_cache_warm() is None  # not opened yet: no caches in play
    z.cache_digest, z.cache_warm, z.forks = "d", False, 1
    assert z.child_cache_warm() is False  # the tree's first worker: cold
    z.forks = 2
    assert z.child_cache_warm() is True  # the first child compiled into the zygote's folder
    z.cache_warm, z.forks = True, 1
    assert z.child_cache_warm() is True  # the quality worker filled it before


def test_the_compile_stack_is_preloaded_on_every_lane() -> None:
    """As every worker imports it before its hello (server.PRELOAD): its memory is the same on both sides."""
    from pytest_dit_ar.worker.server import PRELOAD

    names = lambda device: [m for m, _ in zygote.preload_names(device)]  # noqa: E731
    assert "torch._dynamo" in names("cuda") and "torch._inductor.compile_fx" in names("cuda:0")
    assert "torch._dynamo" in names("cpu") and names("cpu")[0] == "diffusers"
    assert {"torch._dynamo", "torch._inductor.compile_fx"} <= {m for m, _ in PRELOAD}


def test_every_worker_compiles_in_process_whatever_its_cache(tmp_path: Path) -> None:
    """A cold cache (the tree's first worker: the candidate's quality run) and a warm one give the same
    environment, exec'd or forked: a variable that differed would tell the quality run from the timed rounds."""
    from pytest_dit_ar.worker.client import WorkerProcess

    envs = []
    for warm in (True, False, None):
        w = WorkerProcess("candidate", tmp_path, target(), 1, tmp_path / "w.log")
        w.cache_warm = warm
        envs.append(w.environment())
    envs.append(Zygote("best", tmp_path, target(), 1, tmp_path / "fs.log", 30.0, None).environment())
    assert all(env == envs[0] for env in envs)
    assert envs[0]["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
