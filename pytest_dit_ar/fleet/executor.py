"""The executor seam: what a fleet session's driver asks of whatever runs its judgings.

`ray_executor.RayExecutor` is the one implementation (it alone imports Ray); a local session has no executor and
judges in its own process as always. Tests hand the driver a Ray executor whose judges run a stand-in `work`.
"""

from __future__ import annotations

from typing import Protocol

from dit_ar_contract.config import Config
from dit_ar_contract.device import LaneTarget

from .request import JudgeReply, JudgeRequest, Prepared, ReplicaPayload

SLOT_CPUS = 1.0  # each slot's bundle holds this many logical CPUs (Ray confines no core; pinning is the lane's)
IDLE, PREPARED, RUNNING, DONE = "idle", "prepared", "running", "done"  # a judge's states


class Judge(Protocol):
    """One judging's handle. Every call raises `request.JudgeLost` (its cause named) when the judge's process or
    node is gone or the cluster failed the call."""

    name: str

    def prepare(self, payload: ReplicaPayload) -> Prepared: ...  # the replica on the slot's node; no candidate code

    def start(self) -> None: ...  # the verb starts in the judge and runs on whatever happens to the caller

    def state(self) -> str: ...

    def result(self, timeout_s: float) -> JudgeReply | None: ...  # None: not finished within timeout_s

    def output(self, offset: int) -> bytes: ...

    def progress(self) -> bytes | None: ...

    def chunk(self, index: int) -> bytes: ...  # part `index` of the judging's archive (archive.spooled)

    def release(self) -> None: ...  # the judge's process ends and its slot is free


class Executor(Protocol):
    def judge(self, request: JudgeRequest) -> Judge: ...  # queued on the request's slot until it is free

    def attach(self, name: str) -> Judge | None: ...  # a judge started by an earlier driver, None when gone

    def create_slot(self, name: str, gpus: int, cpus: float) -> None: ...  # kept when it exists

    def probe(self, slot: str, gpus: int, cpus: float, config: Config, lane: str) -> LaneTarget: ...
