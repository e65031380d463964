"""Who writes a session's git, ledger and best: the session's own process, never a judge.

A fleet judges each experiment in a Ray worker on a slot's node (fleet/); that judge writes only into its
node-local replica and hands an outcome back, and the session's own process records it. These writes refuse
anywhere a judge runs: in a Ray worker process (Ray sets `RAY_RAYLET_PID` in every worker it starts and so in
everything a worker starts, never in a driver or a `ray job submit` entrypoint) and wherever `DIT_AR_JUDGE` is
set (the fleet's judge sets it for the processes it starts).
"""

from __future__ import annotations

import os

from dit_ar_contract.errors import Refused

JUDGE_VARIABLE = "DIT_AR_JUDGE"
RAY_WORKER_VARIABLE = "RAY_RAYLET_PID"


def judge_process() -> str | None:
    """Why this process is a judge's (no writer of session state), or None for a session's own process."""
    if os.environ.get(JUDGE_VARIABLE):
        return f"{JUDGE_VARIABLE} is set"
    if os.environ.get(RAY_WORKER_VARIABLE):
        return f"a Ray worker process ({RAY_WORKER_VARIABLE} is set)"
    return None


def refuse_in_judge(what: str) -> None:
    """Refuse `what` (a write of git, the ledger or the best) in a judge's process."""
    why = judge_process()
    if why is not None:
        raise Refused(f"{what}: written by the session's own process only, never by a judge ({why}); a judge hands "
                      "its outcome back and the session's process records it")
