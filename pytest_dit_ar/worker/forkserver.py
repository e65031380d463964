"""Harness side of the fork servers: cheap fresh workers for every pair after the first.

A `Zygote` is one separately exec'd process per side and layout, in that side's own sandbox (the same
sandbox a worker gets), that imported the fixed prelude and waits (worker/zygote.py). `Zygote.fork`
returns a `ForkedWorker`: a `WorkerProcess` whose process is a child of the zygote, reached through pipes
the harness made and passed over the zygote's socket. `SideZygotes` holds a side's zygotes and deals the
forks round-robin over them, so that the pairs of one experiment sample several address-space layouts
(a zygote's children share its layout: Lee et al., NDSS 2014); `ForkServers` holds both sides.

Freezing and memory: each forked worker is moved into a cgroup of its own as soon as it is forked
(worker/cgroup.py), so its freeze waits for the kernel to say *frozen* and its memory is its own, not the
fork server's; a freeze stops the side's zygotes too (each in its own cgroup), so nothing of the side runs
while the other side is timed. Where no cgroup is writable, the fallback is the branch's: SIGSTOP to every
process of the side's sandboxes and a wait on the /proc state of the worker's own processes (the zygotes
and the side's other workers excepted), and memory read from /proc for those processes.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dit_ar_contract.errors import CandidateCrash, Refused
from dit_ar_contract.sides import ROLES, Role

from . import cgroup, protocol, spawn
from .bootstrap import BOOTSTRAP
from .client import WorkerLauncher, WorkerProcess, log_tail
from .handle import GROUP_LABEL
from .log_relay import LogRelay
from .processes import host_pid

__all__ = ["ZYGOTE_BOOTSTRAP", "ForkServers", "ForkedWorker", "PidHandle", "SideZygotes", "Zygote", "host_pid"]

ZYGOTE_BOOTSTRAP = BOOTSTRAP  # a fork server is started as every worker is; its stdin (a socket) tells it apart


class PidHandle:
    """What WorkerProcess and a Zygote need of a Popen, for a process the harness did not start (a zygote's child,
    a sandbox the warm servers' keeper started): its life through a pidfd; its exit code is not ours to read."""

    def __init__(self, pid: int):
        self.pid = pid
        self._pidfd = os.pidfd_open(pid)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._pidfd], [], [], 0)[0]:
            self.returncode = -1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not select.select([self._pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
        self.returncode = -1
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass


class _ForkedHandle(PidHandle):
    """A zygote's child: its life through a pidfd, and the pipes the harness made for it."""

    def __init__(self, pid: int, stdin_fd: int, stdout_fd: int):
        super().__init__(pid)
        self.stdin = os.fdopen(stdin_fd, "wb", buffering=0)
        self.stdout = os.fdopen(stdout_fd, "rb", buffering=0)

    def close(self) -> None:
        for f in (self.stdin, self.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            os.close(self._pidfd)
        except OSError:
            pass


@dataclass
class ForkTimes:
    """How long the fork servers took: each zygote's start (spawn to hello) and each fork (request to hello)."""

    zygote_ready_s: list[float] = field(default_factory=list)
    fork_ready_s: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[float]]:
        return {"zygote_ready_s": self.zygote_ready_s, "fork_ready_s": self.fork_ready_s}


class Zygote(WorkerProcess):
    """One fork server of one side, in its own sandbox; `fork` makes fresh workers from it."""

    def __init__(self, *args: Any, side_group: "SideZygotes | None" = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.sides = side_group  # not `group`: that is the zygote's own cgroup (WorkerProcess)
        self._sock: socket.socket | None = None
        self.inner_pid = -1
        self.host_pid = -1
        self.spawned_at = 0.0
        self.forks = 0
        self.fills_cache_late = True  # its cache copy is filled at its first fork (spawn.fill_cache_copy)

    def spawn(self) -> "Zygote":
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.spawned_at = time.perf_counter()
        try:
            spawn.launch(self, self.argv(BOOTSTRAP), theirs.fileno(), None)
        finally:
            theirs.close()
        self._sock = mine
        return self

    def handshake(self) -> "Zygote":
        hello = self._receive(self.timeout_s)
        if not hello.get("ok"):  # only fixed code ran: the harness's or the machine's problem
            raise Refused(f"the {self.side} fork server failed to start ({hello.get('error')}; see "
                          f"{self.log_path}): set performance.fork_server to false to time exec'd pairs")
        self.inner_pid = int(hello["pid"])
        self.prelude_s = float(hello.get("prelude_s", 0.0))
        found = host_pid(self._candidates(), self.inner_pid) if self.namespace else self.proc.pid
        if found is None:
            raise CandidateCrash(f"the {self.side} fork server's process is gone", log_tail(self.log_path))
        self.host_pid = found
        return self

    def attach(self, sock: socket.socket) -> None:
        """Talk to a server another process started, over its control socket (worker/warm.py)."""
        self._sock = sock

    def detach(self) -> socket.socket | None:
        """Give up the control socket (a keeper handing its server over to an experiment)."""
        sock, self._sock = self._sock, None
        return sock

    def state(self, nonce: str) -> dict[str, Any]:
        """The server's own account (its PID and forks so far, the nonce echoed); a silent one is killed."""
        assert self._sock is not None
        self._sock.send(json.dumps({"op": "state", "nonce": nonce}).encode())
        return self._receive(30.0)

    def _candidates(self) -> list[int]:
        return self.namespace.pids() if self.namespace else ([self.proc.pid] if self.proc else [])

    def _receive(self, timeout_s: float) -> dict[str, Any]:
        assert self._sock is not None
        ready = select.select([self._sock], [], [], timeout_s)[0]
        data = self._sock.recv(1 << 16) if ready else b""
        if not data:
            self.kill()
            raise CandidateCrash(f"the {self.side} fork server gave no answer within {timeout_s:.0f} s",
                                 log_tail(self.log_path))
        return protocol.decode(data)

    def child_cache_warm(self) -> bool | None:
        """Whether the child forked last finds its tree's compile cache filled (None: no caches): a worker of the
        tree ran before this zygote opened the folder, or an earlier child of this zygote compiled into it."""
        if self.cache_digest is None:
            return None
        return bool(self.cache_warm) or self.forks > 1

    def fork(self, log_path: Path) -> "ForkedWorker":
        """A fresh worker, forked from this zygote, its hello not yet read (call `handshake`)."""
        if self._sock is None or self.host_pid < 0:
            raise RuntimeError("the fork server was not started")
        self.thaw()  # a frozen zygote cannot fork
        if self.forks == 0:
            spawn.fill_cache_copy(self)  # the tree's cache as its first worker left it
        to_child, from_harness = os.pipe()[::-1]  # (write end kept here, read end for the child)
        from_child, to_harness = os.pipe()
        relay = self.logs.relay(log_path).start()  # the child's stderr: a pipe the harness relays into its log
        started = time.perf_counter()
        try:
            socket.send_fds(self._sock, [json.dumps({"op": "fork"}).encode()],
                            [from_harness, to_harness, relay.write_fd])
            reply = self._receive(60.0)
        finally:
            for fd in (from_harness, to_harness):
                os.close(fd)
            relay.handed_over()
        try:
            handle = forked_handle(self, reply, to_child, from_child, log_path)
        except CandidateCrash:
            relay.join(1.0)  # nothing holds the pipe any more: the relay ends
            raise
        self.forks += 1
        return ForkedWorker(self, handle, log_path, started, relay)

    def freeze(self) -> None:
        if self.sides is not None:
            self.sides.freeze()
        else:
            super().freeze()

    def freeze_own(self) -> None:
        super().freeze()

    def thaw(self) -> None:
        """Thaw the zygote; without a freezer of its own that is a SIGCONT to its whole sandbox, which wakes
        its children that have no freezer either: they are marked thawed, so that the next freeze stops them."""
        was = self.frozen
        super().thaw()
        if was and (self.group is None or self.group.freezer is None) and self.namespace is not None and \
                self.sides is not None:
            for w in self.sides.live:
                if w.zygote is self and (w.group is None or w.group.freezer is None):
                    w.frozen = False

    def close(self) -> None:
        if self._sock is not None:
            self.thaw()
            try:
                self._sock.send(json.dumps({"op": "exit"}).encode())
            except OSError:
                pass
            self._sock.close()
            self._sock = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - a zygote that does not leave is killed
                self.kill()
            self.kill()  # whatever a child left in the sandbox goes with it
            self.proc = None


def forked_handle(z: Zygote, reply: dict[str, Any], to_child: int, from_child: int, log_path: Path) -> _ForkedHandle:
    """The child a zygote's fork reply names, as a handle on its pipes; a refused fork or a child that is gone at
    once is a CandidateCrash (both pipe ends closed)."""
    problem = None
    if not reply.get("ok"):
        problem = f"the {z.side} fork server could not fork: {reply.get('error')}"
    else:
        inner = int(reply["pid"])
        pid = host_pid(z.namespace.pids(), inner) if z.namespace else inner
        try:
            if pid is not None:
                return _ForkedHandle(pid, to_child, from_child)
        except ProcessLookupError:
            pass
        problem = f"the {z.side} worker forked by the fork server died at once"
    os.close(to_child)
    os.close(from_child)
    raise CandidateCrash(problem, log_tail(log_path) if reply.get("ok") else "")


class ForkedWorker(WorkerProcess):
    """A worker forked from a side's zygote: the same protocol and checks as an exec'd worker."""

    def __init__(self, zygote: Zygote, handle: _ForkedHandle, log_path: Path, forked_at: float,
                 relay: LogRelay | None = None):
        super().__init__(zygote.side, zygote.root, zygote.target, zygote.threads, log_path, zygote.timeout_s,
                         zygote.sandbox, logs=zygote.logs)
        self.zygote = zygote
        self.relay = relay
        self.proc = handle  # type: ignore[assignment]
        self.namespace = zygote.namespace
        self.scratch, self.stage = zygote.scratch, zygote.stage  # the zygote's mounts are the child's
        # the zygote's compile-cache folder is the child's: warm if a worker of the tree ran before the zygote
        # opened it, or once an earlier child of this zygote has compiled into it
        self.caches, self.cache_digest, self.cache_warm = zygote.caches, zygote.cache_digest, zygote.child_cache_warm()
        self.forked_at = forked_at
        self.ready_s: float | None = None  # fork request to hello, by the harness's clock
        # a cgroup of its own: its freeze is the kernel's and its memory figure is not the fork server's
        self.group = cgroup.open_group(GROUP_LABEL, spawn.memory_limit_mb(zygote))
        if self.group is not None and not self.group.adopt(handle.pid):
            self.group.remove()
            self.group = None
        self.memory.start()

    def spawn(self) -> "ForkedWorker":
        return self  # forked already

    def write_back_cache(self) -> None:
        """A forked first worker compiled into its fork server's copy of the cache (`Zygote.write_back_cache`)."""
        self.zygote.write_back_cache()

    def handshake(self) -> "ForkedWorker":
        # a sibling's freeze stops the whole side, this unready child included (a pool forks its pairs before
        # building them): it must run to say hello
        self.thaw()
        super().handshake()
        self.ready_s = time.perf_counter() - self.forked_at
        return self

    def processes(self) -> list[int]:
        """The child and whatever else it started: its cgroup's processes, or, without one, whatever runs in
        its side's sandbox, the zygotes and their other workers excepted (a helper the child started still
        counts: it cannot hide memory)."""
        group = self.group
        if group is not None:
            return group.pids()
        if self.namespace is None:
            return [self.pid] if self.proc is not None and self.proc.poll() is None else []
        others = self.zygote.sides.others(self) if self.zygote.sides else {self.zygote.host_pid}
        return [p for p in self.namespace.pids() if p not in others and p != self.namespace.init_pid]

    def freeze(self) -> None:
        """Stop the whole side (its zygotes, its other workers) and this worker, waiting for each."""
        if self.zygote.sides is not None:
            self.zygote.sides.freeze()
        else:
            self.zygote.freeze_own()
            self.freeze_own()

    def freeze_own(self) -> None:
        """This worker alone: its cgroup's freezer, else SIGSTOP (its sandbox, or its process) and a /proc
        state wait on its own processes (WorkerProcess.freeze)."""
        WorkerProcess.freeze(self)

    def thaw(self) -> None:
        if not self.frozen:
            return
        WorkerProcess.thaw(self)
        if (self.group is None or self.group.freezer is None) and self.namespace is not None:
            self.zygote.frozen = False  # the SIGCONT to the sandbox woke its zygote too

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
        if self.group is not None:
            self.group.remove()
            self.group = None
        self.frozen = False
        self.memory.stop()
        if self.relay is not None:
            self.relay.join(2.0)

    def close(self) -> None:
        if self.proc is None:
            return
        handle = self.proc
        super().close()  # thaw, exit request, wait (or kill)
        assert isinstance(handle, _ForkedHandle)
        handle.close()
        if self.zygote.sides is not None:
            self.zygote.sides.forget(self)


class SideZygotes:
    """A side's `count` zygotes; forks are dealt round-robin over them (pair i from zygote i mod count)."""

    def __init__(self, launcher: WorkerLauncher, side: str, root: Path, log_dir: Path, count: int = 1,
                 tag: str = ""):
        if count < 1:
            raise ValueError("a side needs at least one fork server")
        self.side, self.log_dir = side, log_dir
        name = f"{side}-{tag}" if tag else side  # a keeper's servers of one side for several uses (worker/warm.py)
        self.zygotes = [Zygote(side, root, launcher.target, launcher.threads,
                               log_dir / f"forkserver-{name}-{i}.log", launcher.timeout_s, launcher.sandbox,
                               launcher.caches, launcher.mutable, launcher.logs, side_group=self)
                        for i in range(count)]
        self.live: list[ForkedWorker] = []
        self.forked = 0
        self.times = ForkTimes()

    def spawn(self) -> "SideZygotes":
        for z in self.zygotes:
            z.spawn()
        return self

    def ready(self) -> "SideZygotes":
        """Wait for every zygote's hello (call before any timed round: their imports must not overlap it)."""
        for z in self.zygotes:
            if z.host_pid < 0:
                z.handshake()
                self.times.zygote_ready_s.append(time.perf_counter() - z.spawned_at)
        return self

    def fork(self, tag: str) -> ForkedWorker:
        zygote = self.zygotes[self.forked % len(self.zygotes)]
        self.forked += 1
        worker = zygote.fork(self.log_dir / f"worker-{self.side}-{tag}.log")
        self.live.append(worker)
        return worker

    def note_ready(self, worker: ForkedWorker) -> None:
        if worker.ready_s is not None:
            self.times.fork_ready_s.append(worker.ready_s)

    def others(self, worker: ForkedWorker) -> set[int]:
        """Host PIDs of this side's zygotes and of its live workers other than `worker`."""
        return {z.host_pid for z in self.zygotes} | {w.pid for w in self.live if w is not worker}

    def forget(self, worker: ForkedWorker) -> None:
        if worker in self.live:
            self.live.remove(worker)

    def freeze(self) -> None:
        """Stop the side: each zygote (its cgroup, else its sandbox with its children in it) and each live
        worker (its own cgroup, else SIGSTOP and a /proc state wait), each waited for."""
        for z in self.zygotes:
            if z.proc is not None:
                z.freeze_own()
        for w in list(self.live):
            w.freeze_own()

    def close(self) -> None:
        for w in list(self.live):
            w.kill()
            self.forget(w)
        for z in self.zygotes:
            z.close()

    def kill(self) -> None:
        for z in self.zygotes:
            z.kill()


class ForkServers:
    """Both sides' zygotes for one experiment: started early (beside the quality run), used for every
    pair that is not the quality run's."""

    def __init__(self, launcher: WorkerLauncher, cand_root: Path, best_root: Path, log_dir: Path, per_side: int = 1,
                 tag: str = ""):
        self.cand = SideZygotes(launcher, Role.CANDIDATE.label, cand_root, log_dir, per_side, tag)
        self.best = SideZygotes(launcher, Role.BEST.label, best_root, log_dir, per_side, tag)

    def spawn(self) -> "ForkServers":
        self.cand.spawn()
        self.best.spawn()
        return self

    def ready(self) -> "ForkServers":
        self.cand.ready()
        self.best.ready()
        return self

    def fork_pair(self, tag: str) -> tuple[ForkedWorker, ForkedWorker]:
        self.ready()
        return self.cand.fork(tag), self.best.fork(tag)

    def side(self, role: Role) -> SideZygotes:
        return self.cand if role is Role.CANDIDATE else self.best

    def times(self) -> dict[str, dict[str, list[float]]]:
        """Each side's fork-server figures, by the side's label (perf.json's `pool.fork_times`)."""
        return {role.label: self.side(role).times.as_dict() for role in ROLES}

    def close(self) -> None:
        self.cand.close()
        self.best.close()

    def kill(self) -> None:
        self.cand.kill()
        self.best.kill()
