"""What a fleet's judge is sent and what it hands back: typed, picklable records (Ray moves them as they are)."""

from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("experiment", "baseline", "calibration", "revalidation")
RETRIED_ANYWHERE = frozenset({"baseline", "calibration", "revalidation"})  # no candidate code in them at all


# Why a judge was lost (every Ray error maps to one, ray_executor.loss): each is a harness error, never the
# candidate's failure (the candidate runs in sandboxed grandchildren of the judge, under their own memory limit:
# a loss inside them is recorded by the judging itself, as its CRASH).
LOSS_CAUSES = {
    "node-lost": "the judge's node died or left the cluster",
    "ray-oom": "Ray's memory monitor killed the judge (its node ran low on memory)",
    "judge-died": "the judge's process died",
    "unavailable": "the judge did not answer (its node may be dying)",
    "slot-removed": "the judge's slot (placement group) was removed",
    "object-lost": "an object the judge handed back was lost",
    "unschedulable": "the judge cannot be placed on the cluster",
    "cancelled": "the judge's call was cancelled",
    "cluster": "the cluster failed the call (RPC, authentication, object store, Ray itself)",
}


class JudgeLost(Exception):
    """The judge's process or node went away, or Ray failed a call to it: `cause` (one of LOSS_CAUSES) says which.
    A harness error: the driver records nothing against the candidate."""

    def __init__(self, cause: str, detail: str = ""):
        assert cause in LOSS_CAUSES, cause
        self.cause, self.detail = cause, detail
        super().__init__(f"{cause}: {LOSS_CAUSES[cause]}" + (f" ({detail})" if detail else ""))


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
    memory_share: float = 1.0  # the slot's share of its node (its GPUs, or CPUs, over the node's): worker/host_limit


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
