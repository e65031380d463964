"""Which executor a session's verbs go to, and binding a new session to a slot (`dit-ar init --executor ray`).

A session's executor is chosen once, at `init`, and stored in session.json (state/executor.py): the agent's
`dit-ar experiment` never names one. A judge (a Ray worker, or a process with `DIT_AR_JUDGE`) always runs its verb
here, in its own replica: routing never sends a judging on again.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dit_ar_contract.config import load_config
from dit_ar_contract.errors import Refused

from ..state.executor import ExecutorChoice
from ..state.paths import StatePaths
from ..state.session import read_record
from ..state.writer import judge_process
from . import dispatch as dispatch_file
from .executor import SLOT_CPUS

if TYPE_CHECKING:
    from .driver import Driver
    from .executor import Executor

RAY_MISSING = "Ray is not installed here: `pip install 'pytest-dit-ar[ray]'` (or `pip install '.[ray]'` in a checkout)"


def remote_choice(config_path: Path) -> ExecutorChoice | None:
    """The session's executor when its judgings go elsewhere (and this process is not a judge), else None."""
    if judge_process() is not None:
        return None
    try:
        config = load_config(config_path)
    except Refused:
        return None  # the verb itself refuses with the config's problem
    record = read_record(StatePaths(config.root))
    return record.executor if record is not None and record.executor.remote else None


def ray_executor(address: str, out: Callable[[str], None] = print) -> Executor:
    """The Ray executor (Ray is imported here, on use, and only where a fleet session needs it); without Ray
    installed, a refusal that says how to install it."""
    try:
        from .ray_executor import RayExecutor
    except ModuleNotFoundError as exc:
        if exc.name == "ray":
            raise Refused(RAY_MISSING) from None
        raise
    return RayExecutor(address, out=out)


def driver(config_path: Path, out: Callable[[str], None] = print, echo: Callable[[str], object] | None = None,
           quiet: bool = False) -> Driver | None:
    """The fleet driver of the session at `config_path`, None for a local session (`quiet`: the judge's output is
    not printed)."""
    choice = remote_choice(config_path)
    if choice is None:
        return None
    from .driver import Driver

    return Driver(config_path, ray_executor(choice.address, out), out, None if quiet else (echo or sys.stdout.write))


def settle(config_path: Path) -> None:
    """`dit-ar status` of a fleet session: a judging a killed driver left is recorded once it has ended."""
    choice = remote_choice(config_path)
    if choice is None or not dispatch_file.path(StatePaths(load_config(config_path).root)).exists():
        return  # nothing in flight: no need to reach the cluster

    def note(line: str) -> None:
        print(line, file=sys.stderr)

    fleet = driver(config_path, note, quiet=True)
    if fleet is not None:
        fleet.settle()


def slot_names(tag: str, slot: str) -> tuple[str, str]:
    """(fleet, slot): a slot named `FLEET:slot-N` belongs to fleet FLEET; without one the session gets its own."""
    if slot:
        return (slot.split(":", 1)[0] if ":" in slot else slot), slot
    return tag, f"{tag}:slot-0"


def bind(config_path: Path, tag: str | None, lane: str | None, address: str, slot: str, new_baseline: bool = False,
         executor: Executor | None = None, out: Callable[[str], None] = print) -> int:
    """`init` of a session judged in a slot: the slot (made when none is named), its device found in the slot."""
    from ..loop.init_session import init

    config = load_config(config_path)
    lane_obj = config.lane(lane)
    tag = tag or time.strftime("%b%d").lower()
    fleet, slot = slot_names(tag, slot)
    executor = executor or ray_executor(address, out)
    gpus = lane_obj.gpus if lane_obj.is_cuda else 0
    executor.create_slot(slot, gpus, SLOT_CPUS)
    target = executor.probe(slot, gpus, SLOT_CPUS, config, lane_obj.name)
    if not target.runnable:
        raise Refused(f"lane {lane_obj.name!r} cannot run in slot {slot}: {target.problem}")
    out(f"slot {slot}: {target.identity.name or target.device} ({target.identity.uuid or 'no GPU'})")
    return init(config_path, tag, lane_obj.name, out, new_baseline, target,
                ExecutorChoice("ray", address, slot, fleet))
