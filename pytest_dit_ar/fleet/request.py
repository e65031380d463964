"""What a fleet's judge is sent and what it hands back: typed, picklable records (Ray moves them as they are)."""

from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("experiment", "baseline", "calibration", "revalidation")
RETRIED_ANYWHERE = frozenset({"baseline", "calibration", "revalidation"})  # no candidate code in them at all


class NodeLost(Exception):
    """The judge's process or its node went away (Ray: the actor died); the driver decides what that means."""


@dataclass(frozen=True)
class ReplicaPayload:
    """A session's git and state as a replica needs them: a git bundle of its refs, and its state files."""

    bundle: bytes
    branch: str
    head: str
    refs: dict[str, str]  # ref name -> commit, set in the replica as in the session
    state: dict[str, bytes]  # files under .autoresearch/, by path relative to it


@dataclass(frozen=True)
class JudgeRequest:
    """One judging: which session and slot, what to run in the replica (a `dit-ar` verb), and attempt. The session's
    git and state (`ReplicaPayload`) go to the judge with `prepare`, packed while its process starts."""

    kind: str
    run_id: str
    fleet: str
    tag: str
    lane_id: str
    slot: str
    gpus: int  # whole GPUs of the slot's one bundle (0 on a CPU lane)
    cpus: float  # the bundle's logical CPUs (bookkeeping: Ray confines no core)
    config: str  # the config file, relative to the repository root
    argv: tuple[str, ...]  # the verb and its arguments, `--judge-only --run-id RUN` included
    attempt: int = 1

    @property
    def actor(self) -> str:
        """The judge's name in the fleet's namespace: a successor of a killed driver finds it by this."""
        return f"judge:{self.fleet}:{self.tag}:{self.run_id}:{self.attempt}"


@dataclass(frozen=True)
class Placement:
    """Where a judge runs: its node, host, process and the GPUs Ray gave it (its slot's bundle)."""

    node_id: str
    host: str
    pid: int
    gpu_ids: tuple[str, ...] = ()
    started: float = 0.0  # when the judge got its slot (its clock)


@dataclass(frozen=True)
class Prepared:
    """The replica is ready and nothing of the candidate has run."""

    placement: Placement
    replica: str
    seconds: float


@dataclass(frozen=True)
class JudgeReply:
    """What a finished judging hands back: the verb's exit code and last line, and its files (a tar archive of the
    run folder and, for a baseline or a calibration, what the session records beside it)."""

    exit_code: int
    last_line: str
    placement: Placement
    finished: float
    archive_size: int = 0  # bytes of the archive, fetched in chunks (Ray's object store is small on a laptop)
    halt: str = ""  # what the run changed on the node that the harness relies on (the session halts)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def held_s(self) -> float:
        """How long the judging held its slot (from getting the slot to the reply, on the judge's clock)."""
        return max(0.0, self.finished - self.placement.started)
