"""One session cannot hurt another: Ray's errors named as harness errors (never the candidate's), the driver's exit 2
on a lost judge, claims and near-duplicates in the fleet's index, the archive's caps, and each worker's hard memory
limit (its cgroup's files, read and written here on a stand-in folder). The cluster test is
tests/e2e/test_fleet_invariants.py; a real kill at the limit is tests/e2e/test_memory_limit.py."""

from __future__ import annotations

import inspect
import io
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dit_ar_contract.errors import EXIT_REFUSED, Refused
from dit_ar_contract.status import Status
from pytest_dit_ar.fleet import archive, dispatch, index
from pytest_dit_ar.fleet.dispatch import RUN, Dispatch
from pytest_dit_ar.fleet.driver import Driver
from pytest_dit_ar.fleet.index import python_tokens
from pytest_dit_ar.fleet.request import LOSS_CAUSES, JudgeLost, JudgeReply, Placement, Prepared, ReplicaPayload
from pytest_dit_ar.state.ledger import LedgerRow
from pytest_dit_ar.state.paths import StatePaths
from pytest_dit_ar.worker import cgroup, host_limit
from tests.helpers.ray_required import require_ray

PLACE = Placement("node-1", "host-1", 1, ("0",), 0.0)


# -- Ray's errors -----------------------------------------------------------------------------------------------
# Every RayError subclass of the installed Ray, and the cause it is named by. A new one fails here until it is named.
EXPECTED = {
    "OutOfMemoryError": "ray-oom", "NodeDiedError": "node-lost", "LocalRayletDiedError": "node-lost",
    "ActorUnavailableError": "unavailable", "ActorDiedError": "judge-died", "RayActorError": "judge-died",
    "WorkerCrashedError": "judge-died", "ActorPlacementGroupRemoved": "slot-removed",
    "TaskPlacementGroupRemoved": "slot-removed", "ObjectLostError": "object-lost", "ObjectFetchTimedOutError":
    "object-lost", "ObjectFreedError": "object-lost", "ObjectReconstructionFailedError": "object-lost",
    "OwnerDiedError": "object-lost", "ReferenceCountingAssertionError": "object-lost",
    "ActorUnschedulableError": "unschedulable", "TaskUnschedulableError": "unschedulable",
    "TaskCancelledError": "cancelled",
    **{name: "cluster" for name in (
        "ActorAlreadyExistsError", "ActorHandleNotFoundError", "AsyncioActorExit", "AuthenticationError",
        "CrossLanguageError", "GetTimeoutError", "ObjectRefStreamEndOfStreamError", "ObjectStoreFullError",
        "OufOfBandObjectRefSerializationException", "OutOfDiskError", "PendingCallsLimitExceeded",
        "PlasmaObjectNotAvailable", "RayCgraphCapacityExceeded", "RayChannelError", "RayChannelTimeoutError",
        "RayDirectTransportError", "RayError", "RaySystemError", "RpcError", "RuntimeEnvSetupError",
        "StreamingGeneratorReplayInconsistentError", "UnserializableException", "UserCodeException")},
}
REFUSED = {"RayTaskError"}  # the judge's own code raised: a refusal carrying its traceback


def _ray_errors() -> dict[str, type]:
    ray = require_ray()
    return {name: cls for name, cls in vars(ray.exceptions).items()
            if inspect.isclass(cls) and issubclass(cls, ray.exceptions.RayError)}


def _instance(cls: type, text: str = "x") -> BaseException:
    """An instance of a Ray error, its required arguments filled with `text` (bytes where Ray wants bytes)."""
    params = [p for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
              if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for value in (text, text.encode()):
        try:
            return cls(*[value] * len(params))
        except (TypeError, AttributeError, ValueError):
            continue
    return cls.__new__(cls)


def test_every_ray_error_is_named_as_a_harness_error() -> None:
    from pytest_dit_ar.fleet.ray_executor import loss

    errors = _ray_errors()
    assert set(errors) == set(EXPECTED) | REFUSED, "name the new Ray errors in ray_executor.LOSSES and here"
    for name, cls in errors.items():
        if name in REFUSED:
            continue
        lost = loss(_instance(cls), "judge:f:t:run:1")
        assert isinstance(lost, JudgeLost) and lost.cause in LOSS_CAUSES, name
        assert lost.cause == EXPECTED[name], (name, lost.cause)
        assert name in lost.detail and LOSS_CAUSES[lost.cause] in str(lost), name


def test_an_actor_that_died_is_named_by_what_killed_it() -> None:
    from pytest_dit_ar.fleet.ray_executor import loss

    ray = require_ray()
    died = ray.exceptions.ActorDiedError

    def with_text(text: str) -> BaseException:
        exc = died()
        exc.error_msg = text
        return exc

    assert loss(with_text("Worker exit type: NODE_OUT_OF_MEMORY: the node running low on memory"), "j").cause == \
        "ray-oom"
    assert loss(with_text("The actor died because its node died"), "j").cause == "node-lost"
    assert loss(with_text("The actor died unexpectedly"), "j").cause == "judge-died"


@dataclass
class _Ref:
    pass


@dataclass
class _Method:
    def remote(self, *args: object) -> _Ref:
        return _Ref()


@dataclass
class _Actor:
    result: _Method = field(default_factory=_Method)


def test_a_call_to_the_judge_maps_ray_errors_never_lets_one_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """`RayJudge._call`: Ray's memory monitor's kill is `ray-oom`, a dead node `node-lost`, the judge's own failure a
    refusal; no RayError escapes as a traceback."""
    from pytest_dit_ar.fleet import ray_executor

    errors = _ray_errors()
    judge = ray_executor.RayJudge(_Actor(), "judge:f:t:run:1", out=lambda _: None)
    for name, cause in (("OutOfMemoryError", "ray-oom"), ("NodeDiedError", "node-lost"),
                        ("WorkerCrashedError", "judge-died"), ("RpcError", "cluster")):
        raised = _instance(errors[name], "1 worker(s) were killed due to the node running low on memory")

        def get(*_: object, raised: BaseException = raised, **__: object) -> None:
            raise raised

        monkeypatch.setattr(ray_executor.ray, "get", get)
        with pytest.raises(JudgeLost) as lost:
            judge.result(0.1)
        assert lost.value.cause == cause, name
    task_error = errors["RayTaskError"]("result", "Traceback: the harness failed", RuntimeError("boom"))

    def failed(*_: object, **__: object) -> None:
        raise task_error

    monkeypatch.setattr(ray_executor.ray, "get", failed)
    with pytest.raises(Refused, match="the judge failed"):
        judge.result(0.1)


# -- the driver: a lost judge is a harness error, exit 2 ---------------------------------------------------------
@dataclass
class LostJudge:
    """A judge that prepares, starts, then is lost with `cause` while the candidate's code runs."""

    cause: str = "ray-oom"
    name: str = "judge"
    calls: list[str] = field(default_factory=list)

    def prepare(self, payload: ReplicaPayload) -> Prepared:
        return Prepared(PLACE, "", 0.0)

    def start(self) -> None:
        self.calls.append("start")

    def state(self) -> str:
        return "running"

    def result(self, timeout_s: float) -> JudgeReply | None:
        raise JudgeLost(self.cause, "judge:f:t:run:1: OutOfMemoryError: 1 worker(s) were killed")

    def output(self, offset: int) -> bytes:
        return b""

    def progress(self) -> bytes | None:
        return None

    def chunk(self, index: int) -> bytes:
        return b""

    def release(self) -> None:
        self.calls.append("release")


class OneJudge:
    """An executor (executor.Executor) whose one judge is `made`."""

    def __init__(self, made: LostJudge):
        self.made = made

    def judge(self, request: object) -> LostJudge:
        return self.made

    def attach(self, name: str) -> None:
        return None


@pytest.fixture(scope="module")
def fleet_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers.loop import make_project_copy

    return make_project_copy(tmp_path_factory.mktemp("safety") / "repo")


def test_a_judge_lost_while_the_candidate_ran_records_nothing_and_exits_2(fleet_project: Path) -> None:
    from tests.helpers.fleet import CONFIG, candidate, stub_session
    from tests.helpers.loop import git, ledger_rows

    tree = stub_session(fleet_project, "lost", "unused", "lost:slot-0")
    commit = candidate(tree, "\n# an idea killed with its node\n")
    lines: list[str] = []
    judge = LostJudge()
    driver = Driver(tree / CONFIG, OneJudge(judge), out=lines.append, echo=None)
    assert driver.experiment("exact", "an idea") == EXIT_REFUSED
    assert len(lines) == 1 and lines[0].startswith("REFUSED: harness error") and "ray-oom" in lines[0], lines
    assert "Ray's memory monitor killed the judge" in lines[0]
    assert [r for r in ledger_rows(tree) if r.status.is_experiment] == []  # nothing against the candidate
    assert git(tree, "rev-parse", "HEAD") == commit  # the branch is not reset
    assert dispatch.read(StatePaths(tree)) is None and judge.calls == ["start", "release"]
    events = [(e.event, e.reason) for e in index.entries(driver.repo)]
    assert events == [("claim", ""), ("release", "harness error ray-oom")]  # released: judged again freely
    assert index.find(driver.repo, "dit-xl2-256", git(tree, "rev-parse", "HEAD^"), commit) is None


def test_a_judging_left_by_a_killed_driver_whose_judge_is_gone_is_cleared_as_a_harness_error(
        fleet_project: Path) -> None:
    """The next `status`, `recover` or `experiment` finds the record, the judge gone: the same harness error (no row,
    HEAD kept, the record cleared, the claim released), and the verb goes on (None: nothing was recorded)."""
    from tests.helpers.fleet import CONFIG, candidate, stub_session
    from tests.helpers.loop import git, ledger_rows

    tree = stub_session(fleet_project, "left", "unused", "left:slot-0")
    commit = candidate(tree, "\n# an idea whose driver was killed\n")
    lines: list[str] = []
    driver = Driver(tree / CONFIG, OneJudge(LostJudge()), out=lines.append, echo=None)
    index.claim(driver.repo, driver.session, _claimed(tree, "run-left"))
    assert driver.reattach(wait=True) is None
    assert len(lines) == 1 and lines[0].startswith("REFUSED: harness error") and "judge-died" in lines[0], lines
    assert [r for r in ledger_rows(tree) if r.status.is_experiment] == [] and git(tree, "rev-parse", "HEAD") == commit
    assert dispatch.read(StatePaths(tree)) is None
    assert [e.event for e in index.entries(driver.repo) if e.run_id == "run-left"] == ["claim", "release"]


# -- the index: claims and near-duplicates -------------------------------------------------------------------------
def _claimed(tree: Path, run_id: str, message: str = "an idea") -> index.Claim:
    """Write the session's dispatch record naming `run_id` (as the driver does first) and return its claim."""
    from tests.helpers.loop import git

    head, parent = git(tree, "rev-parse", "HEAD"), git(tree, "rev-parse", "HEAD^")
    dispatch.write(StatePaths(tree), Dispatch("experiment", run_id, "", "s", 1, RUN, 0.0, head, parent))
    return index.Claim(run_id, parent, head, message)


def test_a_tree_is_claimed_when_sent_so_two_sessions_cannot_both_send_it(fleet_project: Path) -> None:
    from pytest_dit_ar.state import gitops
    from pytest_dit_ar.state.session import open_session
    from tests.helpers.fleet import CONFIG, candidate, stub_session

    a, b = (stub_session(fleet_project, f"claim-{x}", "unused", f"claim-{x}:slot-0") for x in "ab")
    repo = gitops.open_repo(a)
    sa, sb = open_session(a / CONFIG), open_session(b / CONFIG)
    candidate(a, "\n# one idea\n", unique=False)
    candidate(b, "\n# one idea\n", unique=False)
    index.claim(repo, sa, _claimed(a, "run-a"))
    with pytest.raises(Refused, match="is being judged now") as refused:
        index.claim(repo, sb, _claimed(b, "run-b"))
    assert "session claim-a, run run-a" in str(refused.value)
    assert index.release(repo, sa, "run-a", "harness error node-lost")
    index.claim(repo, sb, _claimed(b, "run-b2"))  # released: B may send it now
    dispatch.clear(StatePaths(b))  # B's driver died before it sent anything: its claim lapses with its record
    index.claim(repo, sa, _claimed(a, "run-a2"))


def test_a_near_duplicate_of_a_discard_is_refused_naming_the_earlier_judging(fleet_project: Path) -> None:
    from pytest_dit_ar.state import gitops
    from pytest_dit_ar.state.session import open_session
    from tests.helpers.fleet import CONFIG, stub_session
    from tests.helpers.loop import commit_change, git

    a, b = (stub_session(fleet_project, f"near-{x}", "unused", f"near-{x}:slot-0") for x in "ab")
    repo = gitops.open_repo(a)
    sa, sb = open_session(a / CONFIG), open_session(b / CONFIG)
    path = "model_under_test/__init__.py"
    commit_change(a, path, "\n\ndef _fast(x):\n    return x * 2\n", "an idea")
    row = LedgerRow("now", "run-a", sa.lane_id, git(a, "rev-parse", "HEAD"), git(a, "rev-parse", "HEAD^"),
                    Status.DISCARD_PERFORMANCE, description="double it", run_dir=".autoresearch/runs/run-a")
    index.add(repo, sa, row)
    commit_change(b, path, "\n\ndef _fast(x):  # re-rolled\n\n        return x*2   \n", "the same idea, re-rolled")
    with pytest.raises(Refused, match="differs only in comments and layout from one already judged") as refused:
        index.claim(repo, sb, _claimed(b, "run-b"))
    assert "session near-a, run run-a, DISCARD-PERFORMANCE ('double it'" in str(refused.value)
    git(b, "reset", "-q", "--hard", "HEAD^")
    commit_change(b, path, "\n\ndef _fast(x):\n    return x * 3\n", "another idea")
    index.claim(repo, sb, _claimed(b, "run-b2"))  # a different program: judged
    dispatch.clear(StatePaths(b))
    index.add(repo, sa, LedgerRow(**{**row.__dict__, "status": Status.KEEP, "run_id": "run-k"}))
    assert index.find(repo, sa.lane_id, row.parent, row.commit) is not None  # the exact tree: always refused


def test_comments_layout_are_not_code_but_docstrings_and_tokens_are() -> None:
    base = 'def f(x):\n    """Double."""\n    return x * 2\n'
    assert python_tokens(base) == python_tokens('def f(x):  # why\n\n  """Double."""\n  return x*2  \n# end\n')
    assert python_tokens(base) == python_tokens('def f(\n    x\n):\n    """Double."""\n    return x * 2\n')
    assert python_tokens(base) != python_tokens('def f(\n    x,\n):\n    """Double."""\n    return x * 2\n')  # a comma
    assert python_tokens(base) != python_tokens('def f(x):\n    """Triple."""\n    return x * 2\n')  # a docstring
    assert python_tokens(base) != python_tokens('def f(x):\n    """Double."""\n    return x * 3\n')
    assert python_tokens('x = """never closed\n') is None  # does not tokenize: compared as words instead


# -- the archive's caps ----------------------------------------------------------------------------------------------
def _tar_file(tmp_path: Path, members: dict[str, bytes]) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "in.tar.gz"
    path.write_bytes(buffer.getvalue())
    return path


def test_an_archive_over_its_caps_is_refused_before_anything_is_written(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    allowed = archive.allowed_members(StatePaths(tmp_path), "experiment", "run-1", "lane")
    run = ".autoresearch/runs/run-1"
    monkeypatch.setattr(archive, "MAX_UNPACKED_BYTES", 1000)
    big = _tar_file(tmp_path, {f"{run}/a.log": b"a" * 600, f"{run}/b.log": b"b" * 600})
    with pytest.raises(Refused, match=r"over the cap of 0 MiB \(archive.MAX_UNPACKED_BYTES\)"):
        archive.unpack(big, tmp_path / "out", allowed)
    monkeypatch.setattr(archive, "MAX_MEMBERS", 3)
    many = _tar_file(tmp_path, {f"{run}/{i}": b"" for i in range(5)})
    with pytest.raises(Refused, match=r"over the cap of 3 \(archive.MAX_MEMBERS\)"):
        archive.unpack(many, tmp_path / "out", allowed)
    assert not (tmp_path / "out").exists()  # nothing written
    fetched: list[int] = []
    with pytest.raises(Refused, match="not fetched"):
        with archive.spooled(tmp_path, lambda i: fetched.append(i) or b"", 5000):
            pass
    assert fetched == []
    (tmp_path / run).mkdir(parents=True)
    (tmp_path / run / "flood.log").write_bytes(b"x" * 2000)
    with pytest.raises(Refused, match="not packed; they stay in the node's replica"):
        archive.archive(tmp_path, [run], tmp_path / "packed.tar.gz")
    assert not (tmp_path / "packed.tar.gz").exists()


# -- each worker's hard memory limit --------------------------------------------------------------------------------
@pytest.mark.parametrize("v2", [True, False])
def test_a_groups_limit_is_written_and_its_oom_kills_named(v2: bool, tmp_path: Path) -> None:
    """The files the kernel reads and writes, on a stand-in folder: the limit in bytes, no swap, the whole group on
    an OOM (v2); the `oom_kill` counter named in the worker's death."""
    names = ("memory.max", "memory.swap.max", "memory.oom.group", "memory.events") if v2 else \
        ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.oom_control")
    for name in names:
        (tmp_path / name).write_text("")
    group = cgroup.Group("w", memory=tmp_path, memory_v2=v2, dirs=[tmp_path])
    assert cgroup.set_limit(group, 512) and group.limit_mb == 512
    limit = (tmp_path / ("memory.max" if v2 else "memory.limit_in_bytes")).read_text()
    assert limit == str(512 << 20)
    assert (tmp_path / "memory.swap.max").read_text() == "0" if v2 else \
        (tmp_path / "memory.memsw.limit_in_bytes").read_text() == str(512 << 20)
    assert cgroup.oom_note(group) == ""
    events = tmp_path / ("memory.events" if v2 else "memory.oom_control")
    events.write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n" if v2 else
                      "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    assert cgroup.oom_kills(group) == 1
    assert cgroup.oom_note(group).startswith("out of memory: the kernel killed it at its memory limit of 512 MiB")
    assert cgroup.oom_note(None) == "" and not cgroup.set_limit(cgroup.Group("none"), 512)


def test_a_workers_limit_is_the_lanes_or_its_slots_share_of_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_limit, "machine_mb", lambda: 64000.0)
    monkeypatch.delenv(host_limit.SHARE_VARIABLE, raising=False)
    assert host_limit.worker_limit_mb(None) == 64000.0 * host_limit.HOST_MEMORY_SHARE  # a local run: the machine
    assert host_limit.worker_limit_mb(3000.0) == 3000.0  # the lane's guardrails.host_memory_mb
    monkeypatch.setenv(host_limit.SHARE_VARIABLE, "0.125")  # a fleet judge's slot: 1 GPU of a node's 8
    assert host_limit.worker_limit_mb(None) == 64000.0 * host_limit.HOST_MEMORY_SHARE / 8
    monkeypatch.setenv(host_limit.SHARE_VARIABLE, "0.0001")
    assert host_limit.worker_limit_mb(None) == host_limit.MIN_LIMIT_MB
    monkeypatch.setenv(host_limit.SHARE_VARIABLE, "not a number")
    assert host_limit.slot_share() == 1.0


def test_a_slots_share_of_its_node_is_its_gpus_or_cpus_over_the_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_dit_ar.fleet import ray_executor

    nodes = [{"NodeID": "n1", "Resources": {"CPU": 64.0, "GPU": 8.0}}, {"NodeID": "n2", "Resources": {"CPU": 4.0}}]
    monkeypatch.setattr(ray_executor.ray, "nodes", lambda: nodes)
    assert ray_executor.node_share("n1", 2, 1.0) == 0.25
    assert ray_executor.node_share("n2", 0, 1.0) == 0.25
    assert ray_executor.node_share("gone", 1, 1.0) == 1.0
