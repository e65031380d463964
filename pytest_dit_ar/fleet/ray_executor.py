"""The fleet's Ray executor: the one module that imports Ray (an import-linter contract holds the rest to that).

- A slot is a detached placement group of one bundle, STRICT_PACK: whole GPUs of one node (a `gpus: 2` lane is
  one bundle of 2, so both GPUs are on the node the judge runs on) and `SLOT_CPUS` logical CPUs.
- A judge is a detached, named actor placed in its session's slot, asking for all of the bundle, so one judge at
  a time holds a slot and others of sessions sharing it queue. `max_restarts=0` and `max_task_retries=0`: Ray
  never runs a judging again by itself (the driver retries once, only before candidate code ran).
- GPU process reuse: each judge is a fresh actor process that ends when the driver releases it, and the verb runs
  in a child process of its own, so nothing of one judging (CUDA context, imported candidate code) outlives it.
- The driver connects with `log_to_driver=False`: the judge's output reaches it through `output` (no log dedup).
- Object store size: a run folder comes back in parts of `archive.FETCH_CHUNK_BYTES` (a laptop's store may be
  150 MiB).
- Every Ray error a call to the judge raises is named (`loss`): Ray's memory monitor killing the judge
  (`OutOfMemoryError`), its node dying, its process dying, its slot removed, ... Each is a harness error (the
  driver records nothing against the candidate); only the judge's own failure (`RayTaskError`) is a refusal
  with the judge's traceback.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
from ray import exceptions as rex
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayError, RayTaskError
from ray.util.placement_group import (
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from dit_ar_contract.config import Config
from dit_ar_contract.device import LaneTarget
from dit_ar_contract.errors import Refused

from .executor import DONE, IDLE, PREPARED, RUNNING
from .request import JudgeLost, JudgeReply, JudgeRequest, Placement, Prepared, ReplicaPayload
from .work import JudgeWork

NAMESPACE = "dit-ar"
READY_TIMEOUT_S = 120.0
WAITING_NOTE_S = 15.0  # a judge that has not got its slot after this long is said to be waiting
UNAVAILABLE_RETRIES = 30  # an actor "temporarily unavailable" (its node may be dying) is asked again, 1 s apart


def connect(address: str) -> None:
    """Join the cluster at `address` ("auto": the one running here) in the fleet's namespace, once."""
    if ray.is_initialized():
        return
    ray.init(address=address or "auto", namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING)


def version() -> str:
    return ray.__version__


# -- slots ---------------------------------------------------------------------------------------------
def slot_bundle(gpus: int, cpus: float) -> dict[str, float]:
    return {"CPU": cpus, **({"GPU": float(gpus)} if gpus else {})}


def create_slot(name: str, gpus: int, cpus: float, timeout_s: float = READY_TIMEOUT_S) -> None:
    """The slot `name` (kept when it exists); refused when no node has the bundle free within `timeout_s`."""
    try:
        get_placement_group(name)
        return
    except ValueError:
        pass
    bundle = slot_bundle(gpus, cpus)
    group = placement_group([bundle], strategy="STRICT_PACK", name=name, lifetime="detached")
    try:
        ray.get(group.ready(), timeout=timeout_s)
    except GetTimeoutError:
        remove_placement_group(group)
        raise Refused(f"slot {name}: no node has {bundle} free within {timeout_s:.0f} s (free now: "
                      f"{ray.available_resources()}); a slot is whole GPUs of one node") from None


def slot_group(name: str) -> Any:
    try:
        return get_placement_group(name)
    except ValueError:
        raise Refused(f"slot {name} does not exist in the cluster (namespace {NAMESPACE}): `dit-ar fleet up` makes "
                      "the fleet's slots; `dit-ar fleet status` lists them") from None


def remove_slot(name: str) -> bool:
    try:
        remove_placement_group(get_placement_group(name))
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class SlotState:
    name: str
    state: str  # Ray's: CREATED, PENDING, RESCHEDULING, REMOVED
    node: str  # the node its bundle is on ("" while pending)


def slot_states(prefix: str) -> list[SlotState]:
    out = []
    for entry in placement_group_table().values():
        name = entry.get("name") or ""
        if name.startswith(prefix) and entry.get("state") != "REMOVED":
            nodes = entry.get("bundles_to_node_id") or {}
            out.append(SlotState(name, str(entry.get("state")), str(next(iter(nodes.values()), ""))))
    return sorted(out, key=lambda s: s.name)


# -- the judge ----------------------------------------------------------------------------------------
def node_share(node_id: str, gpus: int, cpus: float) -> float:
    """A slot's share of its node: its GPUs over the node's, or on a CPU lane its CPUs over the node's (so the slots
    one node can hold never add up to more than the whole)."""
    node = next((n for n in ray.nodes() if n.get("NodeID") == node_id), {})
    total = (node.get("Resources") or {}).get("GPU" if gpus else "CPU", 0.0)
    return min(1.0, (gpus or cpus) / total) if total else 1.0


def here(gpus: int, cpus: float) -> Placement:
    """Where the calling task or actor runs (its node, host, process, GPUs and its slot's share of the node)."""
    ctx = ray.get_runtime_context()
    node = ctx.get_node_id()
    return Placement(node, socket.gethostname(), os.getpid(), tuple(str(g) for g in ray.get_gpu_ids()), time.time(),
                     node_share(node, gpus, cpus))


@ray.remote(max_restarts=0, max_task_retries=0, max_concurrency=4)
class JudgeActor:
    """One judging in its slot: `work` (work.JudgeWork) does it; the verb runs in a thread of its own, so it goes
    on whatever becomes of the driver that started it."""

    def __init__(self, request: JudgeRequest, work: Any):
        self.placement = here(request.gpus, request.cpus)
        self.request, self.work = request, work
        self._state, self._reply, self._error = IDLE, None, ""
        self._done = threading.Event()

    def prepare(self, payload: ReplicaPayload) -> Prepared:
        prepared = self.work.prepare(self.request, self.placement, payload)
        self._state = PREPARED
        return prepared

    def start(self) -> None:
        if self._state == PREPARED:
            self._state = RUNNING
            threading.Thread(target=self._run, name="dit-ar-judge", daemon=True).start()

    def _run(self) -> None:
        try:
            self._reply = self.work.run(self.request, self.placement)
        except BaseException:  # the harness's failure in the judge: the driver refuses with it
            self._error = traceback.format_exc()
        finally:
            self._state = DONE
            self._done.set()

    def state(self) -> str:
        return self._state

    def result(self, timeout_s: float) -> JudgeReply | None:
        if not self._done.wait(timeout_s):
            return None
        if self._error:
            raise RuntimeError(self._error)
        return self._reply

    def output(self, offset: int) -> bytes:
        return self.work.output(offset)

    def progress(self) -> bytes | None:
        return self.work.progress()

    def chunk(self, index: int) -> bytes:
        return self.work.chunk(index)


# Every Ray error a call to the judge can raise, by cause (request.LOSS_CAUSES); the first match wins, so a
# subclass comes before its base. `RayTaskError` (the judge's own code raised) is not here: a refusal.
LOSSES: tuple[tuple[type[BaseException], str], ...] = (
    (rex.OutOfMemoryError, "ray-oom"),
    (rex.NodeDiedError, "node-lost"),
    (rex.LocalRayletDiedError, "node-lost"),
    (rex.ActorUnavailableError, "unavailable"),
    (rex.ActorDiedError, "judge-died"),  # refined by its text (`_actor_died`)
    (rex.RayActorError, "judge-died"),
    (rex.WorkerCrashedError, "judge-died"),
    (rex.ActorPlacementGroupRemoved, "slot-removed"),
    (rex.TaskPlacementGroupRemoved, "slot-removed"),
    (rex.ObjectLostError, "object-lost"),
    (rex.ActorUnschedulableError, "unschedulable"),
    (rex.TaskUnschedulableError, "unschedulable"),
    (rex.TaskCancelledError, "cancelled"),
    (rex.RayError, "cluster"),
)
OOM_WORDS = ("running low on memory", "OUT_OF_MEMORY", "out of memory")
NODE_WORDS = ("node died", "NODE_DIED", "node is dead", "raylet", "preempted", "node was removed")


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - an error whose own text fails is still named by its type
        return ""


def _actor_died(exc: BaseException) -> str:
    """What an ActorDiedError's text says killed the actor (Ray puts the worker's exit type and detail there)."""
    text = _text(exc)
    if any(w.lower() in text.lower() for w in OOM_WORDS):
        return "ray-oom"
    if getattr(exc, "preempted", False) or any(w.lower() in text.lower() for w in NODE_WORDS):
        return "node-lost"
    return "judge-died"


def loss(exc: BaseException, where: str) -> JudgeLost:
    """The named harness error a Ray error raised by a call to the judge at `where` is."""
    cause = next(c for kind, c in LOSSES if isinstance(exc, kind))
    if isinstance(exc, rex.ActorDiedError):
        cause = _actor_died(exc)
    first = next((line.strip() for line in _text(exc).splitlines() if line.strip()), "")
    return JudgeLost(cause, f"{where}: {type(exc).__name__}: {first[:300]}")


class RayJudge:
    """The driver's handle on one judge actor (executor.Judge): Ray's errors turned into the driver's words."""

    def __init__(self, actor: Any, name: str, out: Callable[[str], None] = print):
        self.actor, self.name, self.out = actor, name, out

    def _call(self, method: str, *args: Any, note_after_s: float | None = None) -> Any:
        ref = getattr(self.actor, method).remote(*args)
        unavailable, noted = 0, note_after_s is None
        while True:
            try:
                return ray.get(ref, timeout=None if noted else note_after_s)
            except GetTimeoutError:
                self.out(f"dit-ar: waiting for the slot ({self.name}): another session's judging holds it, or its "
                         "node is being replaced")
                noted = True
            except ActorUnavailableError as exc:
                unavailable += 1
                if unavailable > UNAVAILABLE_RETRIES:
                    raise loss(exc, f"{self.name}: for {UNAVAILABLE_RETRIES} s") from None
                time.sleep(1.0)
                ref = getattr(self.actor, method).remote(*args)
            except RayTaskError as exc:
                raise Refused(f"the judge failed (the harness, not the candidate): {str(exc)[-1500:]}") from None
            except RayError as exc:
                raise loss(exc, self.name) from None

    def prepare(self, payload: ReplicaPayload) -> Prepared:
        return self._call("prepare", payload, note_after_s=WAITING_NOTE_S)

    def start(self) -> None:
        self._call("start")

    def state(self) -> str:
        return self._call("state")

    def result(self, timeout_s: float) -> JudgeReply | None:
        return self._call("result", timeout_s)

    def output(self, offset: int) -> bytes:
        return self._call("output", offset)

    def progress(self) -> bytes | None:
        return self._call("progress")

    def chunk(self, index: int) -> bytes:
        return self._call("chunk", index)

    def release(self) -> None:
        try:
            ray.kill(self.actor, no_restart=True)
        except (RayError, ValueError):
            pass


class RayExecutor:
    """Judges on a Ray cluster (executor.Executor). `work` is what each judge does (work.JudgeWork)."""

    def __init__(self, address: str, work: Any = None, out: Callable[[str], None] = print):
        connect(address)
        self.work = work if work is not None else JudgeWork()
        self.out = out

    def judge(self, request: JudgeRequest) -> RayJudge:
        strategy = PlacementGroupSchedulingStrategy(slot_group(request.slot), placement_group_bundle_index=0)
        try:
            actor = JudgeActor.options(name=request.actor, namespace=NAMESPACE, lifetime="detached",
                                       num_cpus=request.cpus, num_gpus=request.gpus,
                                       scheduling_strategy=strategy).remote(request, self.work)
        except RayError as exc:
            raise loss(exc, request.actor) from None
        return RayJudge(actor, request.actor, self.out)

    def create_slot(self, name: str, gpus: int, cpus: float) -> None:
        create_slot(name, gpus, cpus)

    def remove_slot(self, name: str) -> bool:
        return remove_slot(name)

    def kill_judge(self, name: str) -> None:
        judge = self.attach(name)
        if judge is not None:
            judge.release()

    def attach(self, name: str) -> RayJudge | None:
        try:
            return RayJudge(ray.get_actor(name, namespace=NAMESPACE), name, self.out)
        except ValueError:
            return None
        except RayError as exc:
            raise loss(exc, name) from None

    def probe(self, slot: str, gpus: int, cpus: float, config: Config, lane: str) -> LaneTarget:
        """The lane's device as the slot gives it, resolved on the slot's node (what `init` records)."""
        work = self.work

        @ray.remote(max_retries=0)
        def probe_in_slot() -> LaneTarget:
            return work.probe(config, lane, here(gpus, cpus))

        strategy = PlacementGroupSchedulingStrategy(slot_group(slot), placement_group_bundle_index=0)
        ref = probe_in_slot.options(num_cpus=cpus, num_gpus=gpus, scheduling_strategy=strategy).remote()
        try:
            return ray.get(ref, timeout=READY_TIMEOUT_S)
        except GetTimeoutError:
            ray.cancel(ref, force=True)
            raise Refused(f"slot {slot} did not answer within {READY_TIMEOUT_S:.0f} s (busy, or its node is gone)") \
                from None
        except RayError as exc:
            raise Refused(f"the probe of slot {slot} was lost: {loss(exc, slot)}") from None

    def on_every_node(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """`fn(*args)` once on every alive node (`dit-ar fleet doctor`)."""
        task = ray.remote(max_retries=0)(fn)
        refs = [task.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                .remote(*args) for n in ray.nodes() if n.get("Alive")]
        try:
            return ray.get(refs, timeout=READY_TIMEOUT_S)
        except RayError as exc:
            raise Refused(f"a node did not answer: {loss(exc, fn.__name__)}") from None

    def judges(self, prefix: str) -> list[str]:
        """The names of the fleet's live judges (from the cluster's own table: no dashboard needed)."""
        return [name for name in ray.util.list_named_actors() if name.startswith(prefix)]
