"""Warm fork servers across experiments (lane setting `performance.warm_servers`; worker/warm.py says what is
checked): `start_next` starts the keeper, detached, at the end of an experiment or baseline; `main` is the keeper;
`adopt` is the next experiment's side; `stop` ends a keeper (a new `init`, a new keeper, a refused adoption);
`describe` is `dit-ar status`'s line. The keeper ends itself after `IDLE_S` without an adoption.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import secrets
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from dit_ar_contract.config import Lane
from dit_ar_contract.errors import CandidateCrash
from dit_ar_contract.sides import Role

from ...state.executor import SLOT_DEVICE
from ...state.paths import StatePaths
from ...state.session import Session, open_session
from ...worker import spawn
from ...worker.client import WorkerLauncher
from ...worker.forkserver import ForkedWorker, ForkServers, SideZygotes, Zygote
from ...worker.warm import WarmRecord, check, fingerprint, keeper_alive, record_refusal, start_ticks, take_over

MAX_SERVERS = 16  # the most control sockets one hand-over carries
IDLE_S = 3600.0  # a keeper nobody adopted ends itself (and its servers) after this long
READY_WAIT_S = 120.0  # how long an experiment waits for servers still importing their prelude


def record_path(paths: StatePaths) -> Path:
    return paths.dir / "warm-servers.json"


def read(paths: StatePaths) -> WarmRecord | None:
    """The record of this state folder's keeper; a record copied from another folder (a copied project) is
    dropped, never acted on: its keeper serves the other folder."""
    try:
        record = WarmRecord.from_json(record_path(paths).read_text())
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if record.state_dir != str(paths.dir.resolve()):
        record_path(paths).unlink(missing_ok=True)
        return None
    return record


def write(paths: StatePaths, record: WarmRecord, first: bool = False) -> None:
    """Write the record (`first`: only where none is, so a keeper that was quicker keeps its own)."""
    if first:
        try:
            fd = os.open(record_path(paths), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return
        with os.fdopen(fd, "w") as f:
            f.write(record.to_json())
        return
    tmp = record_path(paths).with_suffix(".tmp")
    tmp.write_text(record.to_json())
    tmp.replace(record_path(paths))


def start_next(session: Session | None, config_path: Path, judged: bool = True) -> int | None:
    """Start the keeper of the next experiment's servers, detached (it outlives this process); its PID. Only after
    a judged, sandboxed run of this machine's own (`judged`)."""
    if session is None or not judged or not session.lane.performance.uses_warm_servers(session.lane.is_cuda):
        return None
    if session.target.device.startswith(SLOT_DEVICE):
        return None  # a fleet session's workers run in its slot, never beside its driver
    paths = session.paths
    stop(paths)
    log = paths.dir / "warm" / "keeper.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", __name__, "--config", str(config_path.resolve()),
                                 "--lane", session.lane.name, "--sys-path", json.dumps(sys.path)],
                                cwd=session.root, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    ticks = start_ticks(proc.pid)
    if ticks is not None:  # a record at once, so that `stop` finds a keeper still starting its servers
        write(paths, WarmRecord(proc.pid, ticks, "", "", session.lane_id, 0.0, [], str(paths.dir.resolve())),
              first=True)
    return proc.pid


def await_ready(paths: StatePaths, keeper_pid: int, wait_s: float = READY_WAIT_S) -> tuple[bool, str]:
    """Wait until the keeper `keeper_pid` started early by this experiment (`performance.warm_servers_early`) has
    its servers' hello, so that none of its imports runs beside a timed round; one that is not ready in `wait_s`
    is stopped (the experiment starts a keeper again when its workers are gone). Whether they are ready and
    waiting, and what happened."""
    record, waited = _wait_ready(paths, keeper_pid, wait_s)
    if record is None or record.keeper_pid != keeper_pid or not keeper_alive(record):
        return False, "the next experiment's keeper ended before its servers were ready"
    if not record.servers:
        stop(paths)
        return False, f"the next experiment's servers were not ready in {wait_s:.0f} s: stopped"
    return True, f"the next experiment's servers were ready after a wait of {waited:.1f} s before the timing"


def stop(paths: StatePaths, wait_s: float = 15.0) -> str | None:
    """End the recorded keeper (its servers die with it); what was stopped, or None."""
    record = read(paths)
    if record is None:
        return None
    stopped = None
    if keeper_alive(record):
        stopped = f"keeper pid {record.keeper_pid}"
        os.kill(record.keeper_pid, signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        while keeper_alive(record) and time.monotonic() < deadline:
            time.sleep(0.05)
        if keeper_alive(record):
            os.kill(record.keeper_pid, signal.SIGKILL)  # its sandboxes die with it (bubblewrap's die-with-parent)
    for server in record.servers:  # a keeper killed outright leaves its servers' empty cgroups behind
        group = server.cgroup()
        if group is not None and not keeper_alive(record):
            group.remove()
    record_path(paths).unlink(missing_ok=True)
    return stopped


def describe(paths: StatePaths) -> str | None:
    """`dit-ar status`'s line about the warm servers, None when there are none."""
    record = read(paths)
    if record is None or not keeper_alive(record):
        return None
    if not record.servers:
        return f"warm servers: starting (keeper pid {record.keeper_pid})"
    servers = ", ".join(f"{s.slot or s.side} pid {s.host_pid}" for s in record.servers)
    when = time.strftime("%H:%M:%S", time.localtime(record.started))
    return f"warm servers: ready since {when} ({servers}; keeper pid {record.keeper_pid})"


class Layout:
    """The servers a keeper starts for the next experiment, by slot, each in its own sandbox: the quality run's pair
    (one per side), the candidate tree's first worker (`first`: it fills a new tree's compile cache) and, on CUDA
    lanes (`performance.warm_timing_servers`), the timing's fork servers (`timing`, `fork_servers` per side). A
    keeper and an adopter build the same layout from the same lane, so they agree on the slots and the
    fingerprint."""

    def __init__(self, launcher: WorkerLauncher, cand_root: Path, best_root: Path, log_dir: Path, lane: Lane):
        cand, best = Role.CANDIDATE.label, Role.BEST.label
        self.cand = SideZygotes(launcher, cand, cand_root, log_dir, tag="quality")
        self.best = SideZygotes(launcher, best, best_root, log_dir, tag="quality")
        self.first = SideZygotes(launcher, cand, cand_root, log_dir, tag="first")
        p = lane.performance
        self.timing = ForkServers(launcher, cand_root, best_root, log_dir, p.fork_servers(lane.is_cuda),
                                  tag="timing") if p.uses_warm_timing_servers(lane.is_cuda) else None
        for _, z in self.slots():
            z.stages_tree_late = True

    def slots(self) -> list[tuple[str, Zygote]]:
        """Every server by its slot name, in staging order: the first worker's before the candidate tree's others
        (the first to open a tree's cache folder is the one whose copy is written back)."""
        out = [("first-candidate", self.first.zygotes[0]), ("quality-candidate", self.cand.zygotes[0]),
               ("quality-best", self.best.zygotes[0])]
        if self.timing is not None:
            for role in (Role.CANDIDATE, Role.BEST):
                out += [(f"timing-{role.label}-{i}", z) for i, z in enumerate(self.timing.side(role).zygotes)]
        return out

    def zygotes(self) -> list[Zygote]:
        return [z for _, z in self.slots()]


class WarmServers:
    """Adopted servers by use; the keeper's connection stays open until they are closed."""

    def __init__(self, conn: socket.socket, layout: Layout, waited_s: float):
        self.conn, self.layout, self.waited_s = conn, layout, waited_s
        self.cand, self.best = layout.cand, layout.best
        self.first_open = True  # the first worker's server, until it is closed

    def side(self, role: Role) -> SideZygotes:
        return self.cand if role is Role.CANDIDATE else self.best

    def close_first(self) -> None:
        """Close the first worker's server: its copy of the cache (what the first worker compiled) is written
        back into the tree's folder as its sandbox is removed (worker/handle.py `kill_all`)."""
        self.layout.first.close()
        self.first_open = False

    def close(self) -> None:
        self.layout.first.close()
        self.cand.close()
        self.best.close()
        if self.layout.timing is not None:
            self.layout.timing.close()
        self.conn.close()  # the keeper kills whatever is left and ends

    def kill(self) -> None:
        for z in self.layout.zygotes():
            z.kill()
        self.conn.close()


class Clock(Protocol):
    def spent(self, phase: str, since: float) -> float: ...


class WarmStart:
    """An experiment's use of the warm servers: adopt them (lane setting performance.warm_servers, every check of
    worker/warm.py passed), fork a new tree's first worker, the quality run's pair and (CUDA lanes) the timed pairs
    from them, close them when the timing is done; `note` says whether they were adopted and why not (the run
    record's `warm_servers`, the experiment's log). Without them those workers are exec'd, as before."""

    def __init__(self) -> None:
        self.servers: WarmServers | None = None
        self.note = ""

    def adopt(self, session: Session, launcher: WorkerLauncher, roots: tuple[Path, Path | None], log_dir: Path,
              prefetch_best: bool, clock: Clock, first: bool = False) -> None:
        """Adopt the servers for an experiment on these (candidate, best) trees, a sandboxed one with the best
        prefetched (`first`: the candidate's tree needs its first worker); the time it took is start-up
        (`warm_servers_adopt`)."""
        cand_root, best_root = roots
        p = session.lane.performance
        if not p.uses_warm_servers(session.lane.is_cuda) or launcher.sandbox is None or best_root is None or \
                not prefetch_best:
            return
        t = time.perf_counter()
        self.servers, why = adopt(session, launcher, cand_root, best_root, log_dir, first)
        self.note = why if self.servers is not None else f"not adopted: {why}; their workers are exec'd"
        clock.spent("warm_servers_adopt", t)

    def fork(self, role: Role) -> ForkedWorker | None:
        """The quality run's worker of `role` forked from its adopted server; None without one, or when the fork
        fails (only fixed code ran there: the harness's problem; that worker is exec'd and the note says so; a
        candidate forked before stays in its server's sandbox until `close`)."""
        if self.servers is None:
            return None
        try:
            return self.servers.side(role).fork("quality" if role is Role.CANDIDATE else "block0")
        except (CandidateCrash, OSError) as exc:
            if role is Role.CANDIDATE:  # nothing forked yet (the best's server hosts nothing either)
                self.close()
            self.note = f"not used: the {role.label} server could not fork ({exc}); that worker is exec'd"
            return None

    def first_worker(self) -> ForkedWorker | None:
        """A new candidate tree's first worker, forked from the server of its own (None without one: exec'd)."""
        if self.servers is None or not self.servers.first_open:
            return None
        first = self.servers.layout.first
        try:
            worker = first.fork("first")
            self.note += "; the new tree's first worker forked from a server of its own"
            return worker
        except (CandidateCrash, OSError) as exc:  # only fixed code ran there: the harness's problem
            self.close()
            digest, caches = first.zygotes[0].cache_digest, first.zygotes[0].caches
            if digest is not None and caches is not None:
                caches.unopen(digest)  # the exec'd first worker opens the tree's folder first, and fills it
            self.note = f"not used: the first worker's server could not fork ({exc}); the workers are exec'd"
            return None

    def close_first(self) -> None:
        if self.servers is not None:
            self.servers.close_first()

    def timing(self) -> ForkServers | None:
        """The timing's fork servers (CUDA lanes), adopted: the timed pairs are forked from them."""
        return self.servers.layout.timing if self.servers is not None else None

    def close(self) -> None:
        """Close the servers (after the timing: its workers live in their sandboxes)."""
        if self.servers is not None:
            self.servers.close()
            self.servers = None


class NextKeeper:
    """The next experiment's keeper, started early by a judged experiment (`performance.warm_servers_early`; `arm`,
    which a plain run never calls): its servers' imports run beside this quality run, and the timing waits for
    their hello (`wait`). `note` is the record's word on it."""

    def __init__(self) -> None:
        self.start: Callable[[], int | None] | None = None
        self.paths: StatePaths | None = None
        self.pid: int | None = None  # the keeper's PID once started (an experiment starts no other)
        self.note = ""

    def arm(self, session: Session, config_path: Path, judged: bool) -> None:
        """A judged, sandboxed experiment on a lane that asks for it starts the next keeper early."""
        if judged and session.lane.performance.starts_next_servers_early(session.lane.is_cuda):
            self.start, self.paths = functools.partial(start_next, session, config_path), session.paths

    def start_early(self) -> None:
        if self.start is not None and self.pid is None:
            self.pid = self.start()

    def wait(self, clock: Clock) -> None:
        """Before any timed round: wait for the keeper's servers (stopped when not ready in time); the wait is
        start-up (`next_servers_wait`)."""
        if self.pid is None or self.paths is None:
            return
        t = time.perf_counter()
        ready, self.note = await_ready(self.paths, self.pid)
        if not ready:
            self.pid = None  # none is waiting: the experiment starts one when its workers are gone
        clock.spent("next_servers_wait", t)


def _wait_ready(paths: StatePaths, keeper_pid: int | None = None,
                wait_s: float = READY_WAIT_S) -> tuple[WarmRecord | None, float]:
    """The record once its servers said hello (a keeper still starting them is waited for, at most `wait_s`; only
    the keeper `keeper_pid` when given), and the wait."""
    t0 = time.perf_counter()
    record = read(paths)
    while record is not None and not record.servers and keeper_alive(record) and \
            keeper_pid in (None, record.keeper_pid) and time.perf_counter() - t0 < wait_s:
        time.sleep(0.1)
        record = read(paths)
    return record, time.perf_counter() - t0


def _receive(record: WarmRecord, slots: list[str]) -> tuple[socket.socket, dict[str, int]] | str:
    """Connect to the keeper and receive its servers' control sockets by slot, or why not."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.settimeout(30.0)
        conn.connect("\0" + record.address)
        data, fds, _, _ = socket.recv_fds(conn, 1 << 16, MAX_SERVERS)
        conn.settimeout(None)
        order = json.loads(data)["sides"] if data else []
    except (OSError, ValueError, KeyError) as exc:
        conn.close()
        return f"their keeper did not hand them over ({exc})"
    if sorted(order) != sorted(slots) or len(fds) != len(order):
        for fd in fds:
            os.close(fd)
        conn.close()
        return f"their keeper handed over {len(fds)} server(s) for {order}"
    return conn, dict(zip(order, fds))


def adopt(session: Session, launcher: WorkerLauncher, cand_root: Path, best_root: Path, log_dir: Path,
          first: bool = False) -> tuple[WarmServers | None, str]:
    """The pre-started servers with each side's tree staged (the first worker's only when `first`), or None and
    why not (they are then stopped)."""
    paths = session.paths
    record, waited = _wait_ready(paths)
    if record is None:
        return None, "none were started (the previous experiment or the baseline starts them)"
    layout = Layout(launcher, cand_root, best_root, log_dir, session.lane)
    slots = layout.slots()
    problem = record_refusal(record, fingerprint(layout.zygotes(), paths.integrity.read_bytes()), session.lane_id,
                             keeper_alive(record))
    if problem is not None:
        stop(paths)
        return None, problem
    got = _receive(record, [name for name, _ in slots])
    if isinstance(got, str):
        stop(paths)
        return None, got
    conn, by_slot = got
    for name, z in slots:
        rec = record.server(name)
        assert rec is not None
        take_over(z, rec, by_slot[name])
    warm = WarmServers(conn, layout, waited)
    problem = next((p for name, z in slots if (p := check(z, record.server(name))) is not None), None)  # type: ignore[arg-type]
    if problem is None:
        try:
            for name, z in slots:
                if first or name != "first-candidate":
                    spawn.stage_late(z)
        except (OSError, RuntimeError) as exc:
            problem = f"their trees could not be staged ({exc})"
    if problem is not None:
        warm.kill()
        stop(paths)
        return None, problem
    if not first:
        warm.close_first()  # the tree's cache is filled already: its server is not needed
    pids = ", ".join(f"{name} pid {z.host_pid}" for name, z in slots[1:3])
    return warm, f"adopted ({pids}; {len(slots)} servers; started {time.time() - record.started:.0f} s ago" + \
        (f", waited {waited:.1f} s for them" if waited >= 0.1 else "") + ")"


# -- the keeper --------------------------------------------------------------------------------------------------
def _peer(conn: socket.socket) -> tuple[int, int]:
    """The connecting process's PID and user (the kernel's SO_PEERCRED: pid, uid, gid)."""
    pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid, uid


def _hand_over(listener: socket.socket, slots: list[tuple[str, Zygote]], paths: StatePaths) -> None:
    """Wait for one adoption (bounded by IDLE_S), hand the servers' sockets over, then hold the sandboxes (they
    die with this process) until the adopter closes its connection."""
    listener.settimeout(IDLE_S)
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            print(f"no experiment adopted the servers in {IDLE_S:.0f} s: ending", flush=True)
            return
        if _peer(conn)[1] != os.getuid():
            conn.close()
            continue
        break
    record_path(paths).unlink(missing_ok=True)  # adopted: no second taker
    socks = [z.detach() for _, z in slots]
    socket.send_fds(conn, [json.dumps({"sides": [name for name, _ in slots]}).encode()],
                    [s.fileno() for s in socks if s is not None])
    for s in socks:
        if s is not None:
            s.close()
    print(f"handed over to pid {_peer(conn)[0]}", flush=True)
    conn.settimeout(None)
    while conn.recv(16):
        pass
    conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pytest_dit_ar.loop.speed.warm_servers")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--lane", required=True)
    parser.add_argument("--sys-path", required=True, help="the experiment's import path, which the workers get")
    args = parser.parse_args(argv)
    sys.path[:] = json.loads(args.sys_path)  # the servers' import path is the one an exec'd worker would get
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from ..workers.launch import launcher_for

    session = open_session(args.config, args.lane)
    paths = session.paths
    launcher = launcher_for(session)
    log_dir = paths.dir / "warm"
    slots = Layout(launcher, paths.candidate_worktree, paths.best_worktree, log_dir, session.lane).slots()
    zygotes = [z for _, z in slots]
    for z in zygotes:
        z.sides = None  # the keeper freezes nothing: each server is on its own here
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        before = fingerprint(zygotes, paths.integrity.read_bytes())
        for z in zygotes:
            z.spawn()
        for z in zygotes:
            z.handshake()
        if fingerprint(zygotes, paths.integrity.read_bytes()) != before:
            print("the harness changed while the servers started: ending", flush=True)
            return 1
        address = f"dit-ar-warm-{secrets.token_hex(12)}"
        listener.bind("\0" + address)
        listener.listen(1)
        from ...worker.warm import ServerRecord

        me = os.getpid()
        write(paths, WarmRecord(me, start_ticks(me) or 0, address, before, session.lane_id, time.time(),
                                [ServerRecord.of(z, name) for name, z in slots], str(paths.dir.resolve())))
        print(f"ready: {', '.join(f'{name} pid {z.host_pid}' for name, z in slots)}", flush=True)
        _hand_over(listener, slots, paths)
        return 0
    finally:
        listener.close()
        record = read(paths)
        if record is not None and record.keeper_pid == os.getpid():
            record_path(paths).unlink(missing_ok=True)
        for z in zygotes:
            sock = z.detach()
            if sock is not None:
                sock.close()
            z.kill()


if __name__ == "__main__":
    sys.exit(main())
