"""How much host memory one worker may hold: the hard limit its cgroup (or, without one, RLIMIT_DATA) enforces.

The lane's `guardrails.host_memory_mb` sets it. Unset, it is derived from the machine: `HOST_MEMORY_SHARE` of the
machine's memory (MemTotal, or the harness's own cgroup limit when that is lower), times the share of the machine
this judging may use. A local run uses the whole machine (share 1). A fleet's judge sets `SHARE_VARIABLE` for its
verb to its slot's share of its node (the slot's GPUs over the node's, or its CPUs over the node's on a CPU lane),
and also puts all its workers' groups inside one group of its own, limited to two workers' worth of that share
(`judging_limit_mb`, cgroup.open_judging): however many workers a judging runs (fork servers, pairs), the slots of
one node together stay below `2 * HOST_MEMORY_SHARE` of it, under Ray's memory monitor's threshold
(docs/design/scale.md). A candidate that holds too much is killed by the kernel inside its own judging, and Ray has
no reason to kill another session's judge.

Without a writable memory cgroup the limit is RLIMIT_DATA, set by the child before exec, and weaker: it is per
process (a worker that starts N processes may hold N times it), it does not count shared memory (tmpfs files,
/dev/shm, memfds) and a process beyond it gets ENOMEM (Python's MemoryError, the candidate's CRASH) instead of a
kernel kill. `dit-ar doctor` and `dit-ar fleet doctor` say which one holds on each machine.
"""

from __future__ import annotations

import os
from pathlib import Path

HOST_MEMORY_SHARE = 0.4  # of the machine (or the slot's part of it), for one worker; two sides stay under 0.8
SHARE_VARIABLE = "DIT_AR_MEMORY_SHARE"  # a fleet's judge's slot's share of its node (read in the harness process)
MIN_LIMIT_MB = 256.0  # a derived limit is never lower (a worker imports torch: about 250 MiB on its own)


def machine_mb() -> float:
    """The machine's memory as this process may use it: MemTotal, or its cgroup's limit when lower."""
    total = _meminfo_mb()
    limit = _own_cgroup_limit_mb()
    return min(total, limit) if limit else total


def _meminfo_mb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / 2**20


def _own_cgroup_limit_mb() -> float | None:
    """The memory limit of the cgroup this process is in (v2 `memory.max`, v1 `memory.limit_in_bytes`)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidates = [Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.max",
                          Path("/sys/fs/cgroup/unified") / path.lstrip("/") / "memory.max"]
        elif "memory" in controllers.split(","):
            candidates = [Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.limit_in_bytes"]
        else:
            continue
        for candidate in candidates:
            try:
                value = candidate.read_text().strip()
            except OSError:
                continue
            if value.isdigit() and int(value) < 1 << 60:
                return int(value) / 2**20
    return None


def slot_share() -> float:
    """The share of the machine this judging may use: a fleet judge's slot's (SHARE_VARIABLE), else the whole."""
    try:
        share = float(os.environ.get(SHARE_VARIABLE, "") or 1.0)
    except ValueError:
        return 1.0
    return min(1.0, share) if share > 0 else 1.0


def derived_mb() -> float:
    """The limit a lane without `guardrails.host_memory_mb` gets on this machine."""
    return max(MIN_LIMIT_MB, machine_mb() * HOST_MEMORY_SHARE * slot_share())


def worker_limit_mb(configured: float | None) -> float:
    """One worker's hard host-memory limit: the lane's setting, else the machine's derived one."""
    return float(configured) if configured else derived_mb()


def judging_limit_mb(share: float) -> float:
    """The limit of a fleet judging's workers together (cgroup.open_judging): two workers' derived limits of the
    slot's share of the node, whatever the lane sets for one worker; so the slots of a node never hold more than
    `2 * HOST_MEMORY_SHARE` of it, however many workers each judging runs."""
    return max(2 * MIN_LIMIT_MB, machine_mb() * 2 * HOST_MEMORY_SHARE * min(1.0, share))
