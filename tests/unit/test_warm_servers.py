"""Warm fork servers (worker/warm.py, loop/speed/warm_servers.py): what an experiment checks before it adopts a server
another process started, and that it falls back (saying why) when a check fails. The end-to-end adoption is
tests/e2e/test_warm_servers.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_dit_ar.loop.speed import warm_servers
from pytest_dit_ar.state.paths import StatePaths
from pytest_dit_ar.worker import warm, zygote
from pytest_dit_ar.worker.client import WorkerLauncher
from pytest_dit_ar.worker.forkserver import Zygote
from tests.unit.test_forkserver_protocol import target

NONCE = "n" * 32


def server(**kw) -> warm.ServerRecord:
    values = dict(side="candidate", sandbox_pid=10, host_pid=12, inner_pid=2, init_pid=11, pid_ns=4026531836,
                  stage="/tmp/dit-ar-x", log_path="/tmp/l.log")
    values.update(kw)
    return warm.ServerRecord(**values)  # type: ignore[arg-type]


def answer(**kw) -> dict:
    return {"ok": True, "pid": 2, "forks": 0, "nonce": NONCE, **kw}


def test_a_fresh_server_that_ran_nothing_is_accepted() -> None:
    assert warm.server_refusal(server(), NONCE, answer(), [], [11, 12]) is None


def test_a_server_that_forked_a_worker_is_refused_on_its_own_word() -> None:
    why = warm.server_refusal(server(), NONCE, answer(forks=1), [], [11, 12])
    assert why is not None and "forked 1 worker" in why


def test_a_server_with_a_child_is_refused_from_the_harness_side() -> None:
    # whatever the server says: the children /proc lists (a real one: tests/e2e/test_warm_servers.py)
    why = warm.server_refusal(server(), NONCE, answer(), [4242], [11, 12])
    assert why is not None and "1 child process(es) ([4242])" in why


def test_another_process_in_the_server_s_sandbox_is_refused() -> None:
    why = warm.server_refusal(server(), NONCE, answer(), [], [11, 12, 13])
    assert why is not None and "other processes ([13])" in why
    assert "not the server" in (warm.server_refusal(server(), NONCE, answer(), [], [11]) or "")


def test_a_wrong_nonce_or_pid_is_refused() -> None:
    assert "handshake" in (warm.server_refusal(server(), NONCE, answer(nonce="old"), [], [11, 12]) or "")
    assert "answered as pid 3" in (warm.server_refusal(server(), NONCE, answer(pid=3), [], [11, 12]) or "")


class Start:
    """What `fingerprint` reads of a fork server: its side, root, command line, environment and sandbox."""

    def __init__(self, env: dict[str, str] | None = None, threads: int = 2):
        self.side, self.root, self.sandbox, self.threads, self.mutable = "best", Path("/p"), None, threads, ("m/",)
        self.env = env or {"A": "1"}

    def argv(self, bootstrap: str) -> list[str]:
        return ["python", "-c", bootstrap]

    def environment(self) -> dict[str, str]:
        return self.env


def test_the_fingerprint_follows_the_prelude_integrity_and_start(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pytest_dit_ar").mkdir()
    source = tmp_path / "pytest_dit_ar" / "server.py"
    source.write_text("x = 1\n")
    monkeypatch.setattr(warm, "HARNESS_ROOT", tmp_path)
    first = warm.fingerprint([Start()], b"integrity 1")  # type: ignore[list-item]
    assert warm.fingerprint([Start()], b"integrity 1") == first  # type: ignore[list-item]
    assert warm.fingerprint([Start()], b"integrity 2") != first  # type: ignore[list-item]
    assert warm.fingerprint([Start(threads=4)], b"integrity 1") != first  # type: ignore[list-item]
    assert warm.fingerprint([Start({"A": "2"})], b"integrity 1") != first  # type: ignore[list-item]
    source.write_text("x = 2\n")  # the harness's prelude changed after the server imported it
    assert warm.fingerprint([Start()], b"integrity 1") != first  # type: ignore[list-item]


def record(state: Path | None = None, **kw) -> warm.WarmRecord:
    values = dict(keeper_pid=1, keeper_start=5, address="a", fingerprint="f" * 64, lane_id="cpu-x", started=1.0,
                  servers=[server()], state_dir=str((state / ".autoresearch").resolve()) if state else "")
    values.update(kw)
    return warm.WarmRecord(**values)  # type: ignore[arg-type]


def test_a_prelude_mismatch_a_dead_keeper_or_another_lane_is_refused() -> None:
    assert warm.record_refusal(record(), "f" * 64, "cpu-x", True) is None
    assert "no longer matches" in (warm.record_refusal(record(), "e" * 64, "cpu-x", True) or "")
    assert "gone" in (warm.record_refusal(record(), "f" * 64, "cpu-x", False) or "")
    assert "lane cpu-x, not gpu" in (warm.record_refusal(record(), "f" * 64, "gpu", True) or "")
    assert "before they were ready" in (warm.record_refusal(record(servers=[]), "f" * 64, "cpu-x", True) or "")


def test_the_record_round_trips_with_its_cgroup() -> None:
    group = {"name": "candidate-ab", "freezer": "/sys/fs/cgroup/freezer/candidate-ab", "freezer_v2": False,
             "memory": None, "memory_v2": True, "dirs": ["/sys/fs/cgroup/freezer/candidate-ab"]}
    back = warm.WarmRecord.from_json(record(servers=[server(group=group)]).to_json())
    rec = back.server("candidate")
    assert rec is not None and back.server("best") is None
    g = rec.cgroup()
    assert g is not None and g.freezer == Path(group["freezer"]) and g.freezer_v2 is False and g.memory is None


def test_the_server_answers_its_fork_count_and_the_nonce(tmp_path: Path) -> None:
    harness, fake = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    z = Zygote("candidate", tmp_path, target(), 1, tmp_path / "fs.log", 30.0, None)
    z.attach(harness)
    seen: dict = {}

    def ask() -> None:
        seen["answer"] = z.state(NONCE)
        harness.send(json.dumps({"op": "exit"}).encode())

    old = signal.getsignal(signal.SIGCHLD)
    asker = threading.Thread(target=ask)
    asker.start()
    try:
        zygote.serve(fake, SimpleNamespace(root=tmp_path, device="cpu", threads=1, cap_gb=None))
    finally:
        signal.signal(signal.SIGCHLD, old)
        asker.join(10)
        harness.close()
        fake.close()
    assert seen["answer"]["forks"] == 0 and seen["answer"]["nonce"] == NONCE


def session(tmp_path: Path) -> SimpleNamespace:
    paths = StatePaths(tmp_path)
    paths.dir.mkdir(parents=True, exist_ok=True)
    paths.integrity.write_text("{}")
    return SimpleNamespace(paths=paths, lane_id="cpu-x", lane=lane(is_cuda=False))


def lane(is_cuda: bool, **perf) -> SimpleNamespace:
    from dit_ar_contract.config import PerfProtocol

    return SimpleNamespace(is_cuda=is_cuda, performance=PerfProtocol(**perf))


def test_a_keeper_starts_a_server_for_each_use_and_the_first_worker_s_is_staged_first(tmp_path: Path) -> None:
    launcher = WorkerLauncher(target(), 1, 30.0)
    cpu = warm_servers.Layout(launcher, tmp_path / "c", tmp_path / "b", tmp_path, lane(False))  # type: ignore[arg-type]
    assert [name for name, _ in cpu.slots()] == ["first-candidate", "quality-candidate", "quality-best"]
    cuda = warm_servers.Layout(launcher, tmp_path / "c", tmp_path / "b", tmp_path, lane(True))  # type: ignore[arg-type]
    names = [name for name, _ in cuda.slots()]
    assert names == ["first-candidate", "quality-candidate", "quality-best", "timing-candidate-0",
                     "timing-candidate-1", "timing-best-0", "timing-best-1"]  # two per side on CUDA lanes
    zygotes = cuda.zygotes()
    assert len({id(z) for z in zygotes}) == len(zygotes) == len({z.log_path for z in zygotes})  # no shared server
    assert all(z.stages_tree_late for z in zygotes)
    assert {z.side for z in zygotes[:2]} == {"candidate"} and zygotes[0].root == tmp_path / "c"
    assert cuda.timing is not None and cuda.timing.side(warm_servers.Role.BEST).zygotes[0].root == tmp_path / "b"
    no_forks = warm_servers.Layout(launcher, tmp_path, tmp_path, tmp_path, lane(True, fork_server=False))  # type: ignore[arg-type]
    assert no_forks.timing is None
    off = warm_servers.Layout(launcher, tmp_path, tmp_path, tmp_path, lane(True, warm_timing_servers=False))  # type: ignore[arg-type]
    assert off.timing is None and len(off.slots()) == 3
    cpu_on = warm_servers.Layout(launcher, tmp_path, tmp_path, tmp_path,
                                 lane(False, warm_servers=True, warm_timing_servers=True))  # type: ignore[arg-type]
    assert [n for n, _ in cpu_on.slots()][3:] == ["timing-candidate-0", "timing-best-0"]  # one per side on CPU


def test_servers_are_found_by_slot_and_an_older_record_s_by_side() -> None:
    rec = record(servers=[server(slot="first-candidate"), server(slot="quality-candidate", host_pid=13),
                          server(side="best")])
    back = warm.WarmRecord.from_json(rec.to_json())
    assert back.server("quality-candidate").host_pid == 13  # type: ignore[union-attr]
    assert back.server("first-candidate").host_pid == 12  # type: ignore[union-attr]
    assert back.server("best") is not None and back.server("candidate") is None
    assert "the quality-candidate server says it forked 1" in (
        warm.server_refusal(back.server("quality-candidate"), NONCE, answer(forks=1), [], [11, 13]) or "")  # type: ignore[arg-type]


def test_without_started_servers_the_experiment_falls_back_and_says_why(tmp_path: Path) -> None:
    s = session(tmp_path)
    adopted, why = warm_servers.adopt(s, WorkerLauncher(target(), 1, 30.0), tmp_path, tmp_path, tmp_path)  # type: ignore[arg-type]
    assert adopted is None and "none were started" in why


def test_a_gone_keeper_s_servers_are_refused_and_forgotten(tmp_path: Path) -> None:
    s = session(tmp_path)
    me = os.getpid()  # a PID that lives, with another start time: the recorded keeper is gone, its PID reused
    warm_servers.write(s.paths, record(tmp_path, keeper_pid=me, keeper_start=(warm.start_ticks(me) or 0) + 1))
    adopted, why = warm_servers.adopt(s, WorkerLauncher(target(), 1, 30.0), tmp_path, tmp_path, tmp_path)  # type: ignore[arg-type]
    assert adopted is None and "gone" in why
    assert not warm_servers.record_path(s.paths).exists()  # and `stop` signalled nothing: this process lives


def test_a_status_line_names_the_keeper_and_its_servers(tmp_path: Path) -> None:
    s = session(tmp_path)
    me = os.getpid()
    warm_servers.write(s.paths, record(tmp_path, keeper_pid=me, keeper_start=warm.start_ticks(me) or 0, servers=[]))
    assert warm_servers.describe(s.paths) == f"warm servers: starting (keeper pid {me})"
    warm_servers.write(s.paths, record(tmp_path, keeper_pid=me, keeper_start=warm.start_ticks(me) or 0))
    line = warm_servers.describe(s.paths) or ""
    assert line.startswith("warm servers: ready since ") and f"candidate pid 12; keeper pid {me}" in line


def test_a_first_record_never_overwrites_a_keeper_s_own(tmp_path: Path) -> None:
    s = session(tmp_path)
    warm_servers.write(s.paths, record(tmp_path, address="the keeper's"))
    warm_servers.write(s.paths, record(tmp_path, address="", servers=[]), first=True)
    back = warm_servers.read(s.paths)
    assert back is not None and back.address == "the keeper's"


def test_a_record_copied_from_another_project_is_dropped_never_acted_on(tmp_path: Path) -> None:
    s = session(tmp_path)
    me = os.getpid()  # alive, with its true start time: were the record this folder's, `stop` would signal it
    warm_servers.write(s.paths, record(tmp_path / "elsewhere", keeper_pid=me, keeper_start=warm.start_ticks(me) or 0))
    assert warm_servers.stop(s.paths) is None
    assert not warm_servers.record_path(s.paths).exists()


def test_warm_servers_are_on_by_default_on_cuda_lanes_only_and_a_setting_wins() -> None:
    from dit_ar_contract.config import PerfProtocol

    assert PerfProtocol().uses_warm_servers(is_cuda=True) and not PerfProtocol().uses_warm_servers(is_cuda=False)
    assert PerfProtocol(warm_servers=True).uses_warm_servers(is_cuda=False)
    assert not PerfProtocol(warm_servers=False).uses_warm_servers(is_cuda=True)
    assert not PerfProtocol(fork_server=False).uses_warm_servers(is_cuda=True)  # they are fork servers


def test_the_next_keeper_starts_early_on_cuda_lanes_only_with_warm_servers_and_a_setting_wins() -> None:
    from dit_ar_contract.config import PerfProtocol

    assert PerfProtocol().starts_next_servers_early(is_cuda=True)
    assert not PerfProtocol().starts_next_servers_early(is_cuda=False)
    assert not PerfProtocol(warm_servers_early=False).starts_next_servers_early(is_cuda=True)
    assert not PerfProtocol(warm_servers=False).starts_next_servers_early(is_cuda=True)  # nothing to start
    assert PerfProtocol(warm_servers=True, warm_servers_early=True).starts_next_servers_early(is_cuda=False)


def _keeper_record(tmp_path: Path, **kw) -> warm.WarmRecord:
    me = os.getpid()  # alive, with its true start time: the keeper, as far as the record says
    return record(tmp_path, keeper_pid=me, keeper_start=warm.start_ticks(me) or 0, **kw)


def test_the_timing_waits_for_the_early_keeper_s_hello(tmp_path: Path) -> None:
    s = session(tmp_path)
    warm_servers.write(s.paths, _keeper_record(tmp_path, servers=[]))  # still importing
    timer = threading.Timer(0.3, lambda: warm_servers.write(s.paths, _keeper_record(tmp_path)))
    timer.start()
    ready, note = warm_servers.await_ready(s.paths, os.getpid(), wait_s=30.0)
    timer.join()
    assert ready and "ready after a wait of" in note
    assert warm_servers.read(s.paths) is not None  # left running, for the next experiment


def test_an_early_keeper_not_ready_in_time_is_stopped_before_any_timed_round(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    s, stopped = session(tmp_path), []
    monkeypatch.setattr(warm_servers, "stop", lambda paths: stopped.append(paths))  # not this test's own process
    warm_servers.write(s.paths, _keeper_record(tmp_path, servers=[]))
    ready, note = warm_servers.await_ready(s.paths, os.getpid(), wait_s=0.2)
    assert not ready and "not ready in 0 s: stopped" in note and stopped == [s.paths]


def test_a_keeper_that_ended_or_another_keeper_s_record_is_not_waited_for(tmp_path: Path) -> None:
    s = session(tmp_path)
    me = os.getpid()  # a PID that lives, with another start time: the recorded keeper is gone
    warm_servers.write(s.paths, record(tmp_path, keeper_pid=me, keeper_start=(warm.start_ticks(me) or 0) + 1,
                                       servers=[]))
    ready, note = warm_servers.await_ready(s.paths, me, wait_s=30.0)
    assert not ready and "ended before its servers were ready" in note
    warm_servers.write(s.paths, _keeper_record(tmp_path, servers=[]))
    ready, _ = warm_servers.await_ready(s.paths, me + 1, wait_s=30.0)  # the record is not this keeper's
    assert not ready


def test_an_experiment_starts_its_early_keeper_once_and_waits_for_it_before_timing(tmp_path: Path) -> None:
    s, me = session(tmp_path), os.getpid()
    keeper, seconds = warm_servers.NextKeeper(), {}
    clock = SimpleNamespace(spent=lambda name, t: seconds.setdefault(name, t))
    keeper.arm(SimpleNamespace(lane=lane(True), paths=s.paths), Path("c"), judged=False)  # type: ignore[arg-type]
    keeper.start_early()  # a plain run: none is started, nothing waited for
    keeper.wait(clock)  # type: ignore[arg-type]
    assert seconds == {} and keeper.note == ""
    started: list[int] = []
    keeper.arm(SimpleNamespace(lane=lane(True), paths=s.paths), Path("c"), judged=True)  # type: ignore[arg-type]
    assert keeper.start is not None
    keeper.start = lambda: started.append(me) or me
    keeper.start_early()
    keeper.start_early()
    assert started == [me] and keeper.pid == me
    warm_servers.write(s.paths, _keeper_record(tmp_path))
    keeper.wait(clock)  # type: ignore[arg-type]
    assert "next_servers_wait" in seconds and keeper.pid == me
    assert "the next experiment's servers were ready" in keeper.note


def test_a_run_whose_keeper_started_early_starts_no_second_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_dit_ar.plugin import session as plugin_session

    calls: list[object] = []
    monkeypatch.setattr(warm_servers, "start_next", lambda *a: calls.append(a))
    for early in (1234, None):
        plugin = SimpleNamespace(keeper_started=False)
        exp = SimpleNamespace(session=object(), sandboxed=True, judge_only=False, config_path=Path("c"),
                              evidence=SimpleNamespace(workers=SimpleNamespace(next=SimpleNamespace(pid=early))))
        plugin_session.start_next_servers(plugin, exp)  # type: ignore[arg-type]
        plugin_session.start_next_servers(plugin, exp)  # type: ignore[arg-type]
    assert len(calls) == 1  # only the run without an early keeper, once
