"""The launcher of a session's workers: the one place a lane's device, threads, timeout, compile caches and
sandbox policy (what every sandbox hides) are turned into a `WorkerLauncher`. The experiment's evidence, the
baseline, the re-validation and `dit-ar profile` all get their workers here."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import quality_suite
from dit_ar_contract.errors import Refused

from ...state import gitops
from ...state.executor import SLOT_DEVICE
from ...state.paths import STATE_DIR
from ...state.session import Session
from ...worker import host_limit, sandbox
from ...worker.client import SandboxPolicy, WorkerLauncher
from ...worker.compile_cache import CompileCaches
from ...worker.log_relay import LogBook
from . import memory_plan


def sandbox_policy(session: Session) -> SandboxPolicy:
    """What every sandbox of the session hides: git, the state, the project's own copy of the mutable paths
    (a side sees only its own tree, at the same path as the other side) and the frozen corpora; and each worker's
    hard host-memory limit (worker/host_limit.py)."""
    root = session.root
    hide = [root / ".git", root / STATE_DIR, *(root / m.rstrip("/") for m in session.config.mutable_paths)]
    hide += gitops.private_paths(root)  # sessions side by side: other worktrees' state and the shared git folder
    hide += [(root / corpus).parent for lane in session.config.lanes.values()
             for corpus in (lane.corpus, lane.holdout_corpus) if corpus]  # the holdout, like the corpus
    hide.append(Path(quality_suite.__file__).resolve().parent / "corpus")
    weights = session.lane.weights_path(root)  # a pipeline folder outside the project (under /tmp, say)
    expose = (root.resolve(), *([Path(weights)] if weights else []))
    memory = host_limit.worker_limit_mb(session.lane.guardrails.host_memory_mb)
    return SandboxPolicy(tuple(dict.fromkeys(p.resolve() for p in hide)), session.lane.is_cuda, expose,
                         session.config.mutable_paths, memory)


def launcher_for(session: Session, sandboxed: bool = True) -> WorkerLauncher:
    """The workers of a session's lane: its device, threads, round timeout and (unless opted out) sandbox."""
    if session.target.device.startswith(SLOT_DEVICE):
        raise Refused(f"this session judges in its fleet's slot ({session.target.device[len(SLOT_DEVICE):]}): no "
                      "worker runs beside its driver; `dit-ar experiment`, `baseline` and `calibrate` send the "
                      "work to the slot")
    p = session.lane.performance
    policy = None
    if sandboxed:
        problem = sandbox_problem()
        if problem:
            raise Refused(f"the workers cannot be sandboxed here: {problem}", way_out="`dit-ar doctor` checks the "
                          "sandbox; `--unsandboxed` runs without it (recorded in the ledger)")
        policy = sandbox_policy(session)
        weights = session.lane.weights_path(session.root)
        refusal = sandbox.unreadable_refusal(Path(weights), (session.root.resolve(),)) if weights else None
        if refusal:
            raise Refused(refusal)
    caches = CompileCaches(session.paths.compile_cache, p.compile_cache_gb, p.compile_cache_keep)
    return WorkerLauncher(session.target, p.threads, p.round_timeout_s, policy, caches, session.config.mutable_paths,
                          LogBook.of_mb(p.worker_log_mb))


def memory_budget(session: Session) -> memory_plan.MemoryBudget:
    """What the lane's live workers may hold together: the emulated card, the target's, or this device's."""
    lane, target = session.lane, session.target
    return memory_plan.budget(lane.is_cuda, session.config.target.vram_gb, target.on_target,
                              lane.guardrails.emulated_vram_gb, target.identity.memory_gb or None)


@lru_cache(maxsize=1)
def sandbox_problem() -> str | None:
    return sandbox.available()
