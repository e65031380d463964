"""What a fleet's judge does in its slot: build the session's replica, run the `dit-ar` verb there as one child
process (both timed sides are its workers, on the slot's GPUs), and pack what the session records.

This module imports no Ray: the judge actor (ray_executor.py) hands in where it runs (`Placement`) and calls these
methods; tests call them with a stand-in. Ray's pitfalls handled here:

- CUDA_VISIBLE_DEVICES with zero GPUs: Ray 2.x leaves it unset for an actor without GPUs (every GPU visible), so
  a CPU lane's judge sets it to "" itself, and a GPU lane's judge sets it to exactly the GPUs Ray gave it.
- CUDA device order: Ray's GPU ids are indices; CUDA_DEVICE_ORDER=PCI_BUS_ID makes them nvidia-smi's indices,
  which `device.resolve_lane` turns into the UUIDs the session's device was recorded by.
- Memory: Ray's memory monitor kills workers by its own policy when its node runs low, and cannot see that memory
  sits in a sandboxed grandchild of one judge. The judge gives its verb its slot's share of the node's memory
  (`Placement.memory_share`), each worker's hard limit is derived from it (worker/host_limit.py), all the
  judging's workers' groups sit inside one group of the judge's with a limit of their own (cgroup.open_judging),
  and a candidate beyond a limit is killed by the kernel inside its own judging: its CRASH, no other's.
- OMP_NUM_THREADS: Ray sets it to 1 in its workers; the judge's child gets the environment of a plain run, and
  never Ray's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH).
- Log deduplication: the verb's output goes to a log in the run folder and reaches the driver through `output`,
  never through Ray's log forwarding (which merges repeated lines of different processes).
- A child outliving its judge: the child gets SIGKILL when the judge's process dies (PR_SET_PDEATHSIG, set for
  the thread that starts it, which waits for it), and its sandboxed workers die with it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dit_ar_contract import device
from dit_ar_contract.config import Config
from dit_ar_contract.device import LaneTarget

from ..state.paths import STATE_DIR, StatePaths
from ..state.writer import JUDGE_VARIABLE
from ..worker import cgroup, host_limit
from ..worker.host_limit import SHARE_VARIABLE
from .archive import FETCH_CHUNK_BYTES, allowed_members, archive
from .request import JudgeReply, JudgeRequest, Placement, Prepared, ReplicaPayload

PR_SET_PDEATHSIG = 1
ARCHIVE = "judge-archive.tar.gz"  # in the replica's state folder (never among the members it packs)


def slot_environment(placement: Placement) -> dict[str, str]:
    """The variables a judge sets for itself and its child: its GPUs only, in nvidia-smi's order, and its slot's
    share of the node's memory (each worker's derived memory limit, worker/host_limit.py)."""
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(placement.gpu_ids),
            JUDGE_VARIABLE: placement.node_id, SHARE_VARIABLE: f"{placement.memory_share:.6f}"}


HIDDEN_FROM_CHILD = ("OMP_NUM_THREADS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")  # Ray's settings, Ray's secret


def child_environment(placement: Placement) -> dict[str, str]:
    """The verb's environment: the judge's, without Ray's thread setting and its token (nothing in the verb needs
    the cluster, and an unsandboxed worker would inherit it)."""
    env = {k: v for k, v in os.environ.items() if k not in HIDDEN_FROM_CHILD}
    env.update(slot_environment(placement))
    return env


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # resolved before any fork: the child only calls it


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the thread that started it (the judge's) exits."""
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


class JudgeWork:
    """One judging in its slot: `prepare` (the replica; no candidate code), then `run` (the verb), then `chunk`."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self.log: Path | None = None
        self.archive: Path | None = None  # the judging's files, packed in the replica (archive.py's caps)
        self.prepare_s = 0.0

    def probe(self, config: Config, lane: str, placement: Placement) -> LaneTarget:
        """The lane's device as this slot gives it (what `init` records as the session's device)."""
        os.environ.update(slot_environment(placement))
        return device.resolve_lane(config, config.lane(lane))

    def prepare(self, request: JudgeRequest, placement: Placement, payload: ReplicaPayload) -> Prepared:
        from . import replica  # GitPython: imported when a replica is built, not when the judge's process starts

        t = time.time()
        os.environ.update(slot_environment(placement))
        self.root = replica.build(replica.replica_path(placement.node_id, request.fleet, request.tag),
                                  payload, request.tag, request.lane_id)
        run_dir = StatePaths(self.root).run(request.run_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.log = run_dir / "judge.log"
        self.log.write_bytes(b"")
        self.prepare_s = time.time() - t
        return Prepared(placement, str(self.root), self.prepare_s)

    def run(self, request: JudgeRequest, placement: Placement) -> JudgeReply:
        """The verb in the replica, as one child process; its exit code, last line and files."""
        assert self.root is not None and self.log is not None, "prepare() first"
        t = time.time()
        argv = [sys.executable, "-P", "-m", "pytest_dit_ar.cli", "--config", str(self.root / request.config),
                *request.argv]
        env = child_environment(placement)
        group = cgroup.open_judging("judging", host_limit.judging_limit_mb(placement.memory_share))
        if group is not None:  # every worker's group inside it: their memory together is held by its limit
            env[cgroup.PARENT_VARIABLE] = group.name
        try:
            with open(self.log, "ab") as log:
                proc = subprocess.Popen(argv, cwd=self.root, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent)
                code = proc.wait()
        finally:
            if group is not None:
                group.remove()  # whatever of the judging is left ends with it
        paths = StatePaths(self.root)
        halt = paths.halt.read_text() if paths.halt.exists() else ""
        self.archive = paths.dir / ARCHIVE
        size = archive(self.root, list(allowed_members(paths, request.kind, request.run_id, request.lane_id)),
                       self.archive)
        text = self.log.read_text(errors="replace")
        return JudgeReply(code, last_line(text), placement, time.time(), size, halt,
                          {"replica": self.prepare_s, "verb": time.time() - t})

    def output(self, offset: int) -> bytes:
        """The verb's output from byte `offset` on (the driver prints it as it comes)."""
        if self.log is None or not self.log.exists():
            return b""
        with open(self.log, "rb") as fh:
            fh.seek(offset)
            return fh.read(1 << 20)

    def progress(self) -> bytes | None:
        """The replica's live.json (the driver mirrors it for `dit-ar watch`)."""
        if self.root is None:
            return None
        path = self.root / STATE_DIR / "live.json"
        try:
            return path.read_bytes()
        except OSError:
            return None

    def chunk(self, index: int) -> bytes:
        if self.archive is None:
            return b""
        with open(self.archive, "rb") as fh:
            fh.seek(index * FETCH_CHUNK_BYTES)
            return fh.read(FETCH_CHUNK_BYTES)

