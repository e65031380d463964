"""Warm fork servers: fork servers started before the experiment that forks its workers from them.

A keeper process (loop/speed/warm_servers.py), started detached at the end of an experiment or baseline, starts
the next experiment's `Zygote`s, each in its own sandbox with an empty tree and cache folder (`spawn.empty_stage`):
it imports the fixed prelude only. Each has a slot (`ServerRecord.slot`): one per side for the quality run's pair,
one for the candidate tree's first worker, and, on CUDA lanes, the timing's fork servers of both sides.
It records the servers (`WarmRecord`, the state folder's `warm-servers.json`) and waits on an
abstract Unix socket. The next experiment connects, receives the servers' control sockets (SCM_RIGHTS) and adopts
them only if every check passes (`record_refusal`, `server_refusal`):

* the prelude: the fingerprint of what the servers imported and how they were started (the harness's source, the
  interpreter and library versions, integrity.json, each side's command line, environment and sandbox policy),
  taken by the keeper before it started them and again after their hello, equals the adopter's own;
* nothing ran since: each server answers a fresh nonce with its own fork count (0), and the harness sees, in
  /proc, no child of the server and no process in its sandbox besides the sandbox's init and the server.

Then the harness copies each side's tree into its servers' (bind-mounted) tree folders: a new tree's first worker
(which fills its compile cache, neither judged nor timed) is forked from a server of its own, the quality worker
and the best's first worker from the quality servers, the timed pairs from the timing servers. No two of these
uses share a server or a sandbox, so a judged worker and a timed one never share a history, and the quality pair's
candidate and the later pairs' come from different servers (different address-space layouts). The
keeper is the sandboxes' parent (they die with it): it lives until the adopting experiment closes its connection,
then kills whatever is left.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from dit_ar_contract.errors import CandidateCrash

from . import cgroup
from . import sandbox as sandbox_mod
from .bootstrap import HARNESS_ROOT
from .forkserver import ZYGOTE_BOOTSTRAP, PidHandle, Zygote

PACKAGES = ("pytest_dit_ar", "dit_ar_contract", "quality_suite", "perf_suite")  # the harness the prelude imports
LIBRARIES = ("torch", "diffusers", "transformers", "safetensors", "numpy")


def fingerprint(zygotes: list[Zygote], integrity: bytes) -> str:
    """What a fork server's prelude and start depend on: the harness's source files, the interpreter, the
    libraries' versions, the session's integrity record, the variables the sandbox passes on, and each server's
    command line, environment (its import path included) and sandbox policy (a changed lane setting or a new
    harness makes a pre-started server unusable)."""
    h = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((HARNESS_ROOT / package).rglob("*.py")):
            h.update(str(path.relative_to(HARNESS_ROOT)).encode() + b"\0" + path.read_bytes())
    h.update(f"{sys.executable}\0{sys.version}".encode())
    for name in LIBRARIES:
        try:
            h.update(f"{name}={metadata.version(name)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{name}=none".encode())
    h.update(hashlib.sha256(integrity).digest())
    passed = {k: os.environ.get(k) for k in (*sandbox_mod.ENV_PASSED, cgroup.DISABLE_VARIABLE)}
    h.update(json.dumps(passed, sort_keys=True).encode())  # what the sandbox passes on (CUDA_VISIBLE_DEVICES, ...)
    for z in zygotes:
        start = {"side": z.side, "root": str(z.root), "argv": z.argv(ZYGOTE_BOOTSTRAP), "env": z.environment(),
                 "sandbox": repr(z.sandbox), "threads": z.threads, "mutable": list(z.mutable)}
        h.update(json.dumps(start, sort_keys=True, default=str).encode())
    return h.hexdigest()


@dataclass
class ServerRecord:
    """One side's pre-started fork server, as its keeper started it."""

    side: str
    sandbox_pid: int  # bubblewrap, the keeper's child
    host_pid: int  # the server (PID 2 of its sandbox)
    inner_pid: int
    init_pid: int  # the sandbox's init
    pid_ns: int
    stage: str
    log_path: str
    group: dict[str, Any] | None = None
    slot: str = ""  # what the keeper started it for (loop/speed/warm_servers.py `Layout`); "" reads as its side

    @classmethod
    def of(cls, z: Zygote, slot: str = "") -> ServerRecord:
        assert z.proc is not None and z.namespace is not None and z.stage is not None
        group = None
        if z.group is not None:
            group = {k: (str(v) if isinstance(v, Path) else [str(p) for p in v] if isinstance(v, list) else v)
                     for k, v in asdict(z.group).items()}
        return cls(z.side, z.proc.pid, z.host_pid, z.inner_pid, z.namespace.init_pid, z.namespace.pid_ns,
                   str(z.stage), str(z.log_path), group, slot or z.side)

    def cgroup(self) -> cgroup.Group | None:
        g = self.group
        if g is None:
            return None
        return cgroup.Group(g["name"], Path(g["freezer"]) if g["freezer"] else None, g["freezer_v2"],
                            Path(g["memory"]) if g["memory"] else None, g["memory_v2"], [Path(d) for d in g["dirs"]])


@dataclass
class WarmRecord:
    """The keeper and its servers (the state folder's warm-servers.json)."""

    keeper_pid: int
    keeper_start: int  # the keeper's start time in clock ticks since boot (/proc/PID/stat): a reused PID differs
    address: str  # the keeper's abstract Unix socket
    fingerprint: str
    lane_id: str
    started: float  # time.time() when its servers said hello
    servers: list[ServerRecord] = field(default_factory=list)
    state_dir: str = ""  # the state folder it serves (a copied folder's record names another: never acted on)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> WarmRecord:
        d = json.loads(text)
        return cls(**{**d, "servers": [ServerRecord(**s) for s in d["servers"]]})

    def server(self, slot: str) -> ServerRecord | None:
        """The server started for `slot` (a record's servers before slots existed are named by their side)."""
        return next((s for s in self.servers if (s.slot or s.side) == slot), None)


def start_ticks(pid: int) -> int | None:
    """A process's start time (clock ticks since boot), None when it is gone (or a zombie: it has ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def keeper_alive(record: WarmRecord) -> bool:
    return start_ticks(record.keeper_pid) == record.keeper_start


def record_refusal(record: WarmRecord, fingerprint_now: str, lane_id: str, alive: bool) -> str | None:
    """Why the recorded servers cannot be adopted as a whole (None: they may be, server checks aside)."""
    if not record.servers:
        return "their keeper ended before they were ready"
    if not alive:
        return f"their keeper (pid {record.keeper_pid}) is gone"
    if record.lane_id != lane_id:
        return f"they were started for lane {record.lane_id}, not {lane_id}"
    if record.fingerprint != fingerprint_now:
        return ("the prelude they imported or their start no longer matches this harness (its source, libraries, "
                "integrity.json or the lane's settings changed since they were started)")
    return None


def server_refusal(rec: ServerRecord, nonce: str, answer: dict[str, Any], children: list[int],
                   sandbox_pids: list[int]) -> str | None:
    """Why one server cannot be adopted: its own answer (a fresh nonce echoed, its PID, no fork yet) and what the
    harness sees of it in /proc (no child, nothing in its sandbox but its init and itself)."""
    who = f"the {rec.slot or rec.side} server"
    if not answer.get("ok") or answer.get("nonce") != nonce:
        return f"{who} did not answer the handshake ({answer.get('error', 'wrong nonce')})"
    if answer.get("pid") != rec.inner_pid:
        return f"{who} answered as pid {answer.get('pid')}, recorded as {rec.inner_pid}"
    if answer.get("forks") != 0:
        return f"{who} says it forked {answer.get('forks')} worker(s) since it was started"
    if children:
        return f"{who} has {len(children)} child process(es) ({children[:3]}): it ran something since it started"
    extra = sorted(set(sandbox_pids) - {rec.init_pid, rec.host_pid})
    if rec.host_pid not in sandbox_pids or extra:
        return f"{who}'s sandbox holds other processes ({extra[:3]}) or not the server"
    return None


def children_of(pid: int) -> list[int]:
    """The children of `pid` (every thread's /proc children list)."""
    found: list[int] = []
    try:
        for task in os.scandir(f"/proc/{pid}/task"):
            text = Path(task.path, "children").read_text()
            found += [int(p) for p in text.split()]
    except OSError:
        pass
    return sorted(set(found))


def take_over(z: Zygote, rec: ServerRecord, sock_fd: int) -> Zygote:
    """Give a freshly made `Zygote` (not spawned) the pre-started server's process, sandbox, cgroup and socket."""
    z.attach(socket.socket(fileno=sock_fd))
    z.proc = PidHandle(rec.sandbox_pid)  # type: ignore[assignment]
    z.namespace = sandbox_mod.Namespace(rec.init_pid, rec.pid_ns)
    z.group = rec.cgroup()
    z.stage = Path(rec.stage)
    z.scratch = z.stage / "scratch"
    z.log_path = Path(rec.log_path)
    z.host_pid, z.inner_pid = rec.host_pid, rec.inner_pid
    z.stages_tree_late = True
    z.memory.start()
    return z


def check(z: Zygote, rec: ServerRecord) -> str | None:
    """Both sides of the 'nothing ran' check for one adopted server."""
    nonce = secrets.token_hex(16)
    try:
        answer = z.state(nonce)
    except CandidateCrash as exc:  # only fixed code ran there: a harness fault, refused, never the candidate's
        answer = {"ok": False, "error": str(exc)}
    assert z.namespace is not None
    return server_refusal(rec, nonce, answer, children_of(rec.host_pid), z.namespace.pids())
