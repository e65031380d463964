"""The fleet's invariants on a local multi-node Ray cluster with fake GPUs and stand-in judges (tests/helpers/fleet).

Each test drives real sessions (worktrees of one project copy, bound to slots) through the real driver and the real
Ray executor; only the judge's work is a stand-in: it takes its slot, logs where and when, sleeps and hands back
an outcome. What runs where, how often and what is recorded is the product's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status
from tests.helpers.fleet import CONFIG, StubWork, candidate, judged_log, stub_session
from tests.helpers.loop import git, ledger_rows, make_project_copy
from tests.helpers.ray_required import require_ray

ray = require_ray()
# extended: CI's time budget; test_fleet_embedded.py's crash judged in a slot is the fleet's test in CI
pytestmark = [pytest.mark.ray, pytest.mark.extended]

from pytest_dit_ar.fleet import ray_executor  # noqa: E402 - after the skip: needs Ray
from pytest_dit_ar.fleet.driver import Driver  # noqa: E402


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_project_copy(tmp_path_factory.mktemp("fleet") / "repo")


def executor(cluster, work: StubWork) -> ray_executor.RayExecutor:  # noqa: ANN001 - a Cluster
    return ray_executor.RayExecutor(cluster.address, work=work, out=lambda _: None)


def driver(tree: Path, work: StubWork, cluster) -> Driver:  # noqa: ANN001
    return Driver(tree / CONFIG, executor(cluster, work), out=lambda _: None, echo=None)


@pytest.fixture
def slot(fleet_cluster):  # noqa: ANN001, ANN201 - makes slots of one GPU; removes them after the test
    made = []

    def make(name: str, gpus: int = 1) -> str:
        ray_executor.create_slot(name, gpus, 1.0)
        made.append(name)
        return name

    yield make
    for name in made:
        ray_executor.remove_slot(name)


def test_no_two_judged_workers_share_a_gpu(fleet_cluster, slot, project: Path, tmp_path: Path) -> None:
    """8 sessions on 4 fake GPUs (2 nodes of 2; 2 sessions a slot), 2 experiments each, all at once: the log of
    (node, GPU, start, end) has no overlap on any GPU; each session stayed on its slot's one GPU; every experiment
    has exactly one ledger row."""
    slots = [slot(f"gpu8:slot-{i}") for i in range(4)]
    trees = [stub_session(project, f"gpu8-{i:02d}", fleet_cluster.address, slots[i // 2]) for i in range(8)]
    work = StubWork(str(tmp_path), sleep_s=0.3)
    errors = []

    def session(tree: Path) -> None:
        try:
            for n in range(2):
                candidate(tree, f"\n# idea {n} of {tree.name}\n")
                assert driver(tree, work, fleet_cluster).experiment("exact", f"idea {n}") == 1
        except BaseException as exc:  # noqa: BLE001 - reported below with the session's name
            errors.append(f"{tree.name}: {exc!r}")

    threads = [threading.Thread(target=session, args=(t,)) for t in trees]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    log = judged_log(tmp_path)
    assert len(log) == 16
    by_gpu = defaultdict(list)
    for entry in log:
        assert len(entry["gpus"]) == 1, entry
        by_gpu[(entry["node"], entry["gpus"][0])].append((entry["start"], entry["end"], entry["tag"]))
    assert len(by_gpu) == 4, sorted(by_gpu)
    for gpu, spans in by_gpu.items():
        spans.sort()
        for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
            assert start >= end, f"{a} and {b} overlap on {gpu}"
    for tag in {e["tag"] for e in log}:
        assert len({(e["node"], e["gpus"][0]) for e in log if e["tag"] == tag}) == 1, tag
    for tree in trees:
        rows = [r for r in ledger_rows(tree) if r.status.is_experiment]
        assert len(rows) == 2 and len({r.run_id for r in rows}) == 2
        assert git(tree, "rev-parse", "HEAD") == rows[0].parent  # both discarded: back on the best


def _hold_then(cluster, hold: Path, phase: str, run: threading.Thread) -> str:  # noqa: ANN001
    """Wait for the judge to reach `phase`, remove its node (ungracefully), add a fresh node; return the run id."""
    deadline = time.time() + 120
    while not list(hold.glob(f"{phase}.*")) and time.time() < deadline:
        time.sleep(0.1)
    marker = next(hold.glob(f"{phase}.*"))
    node_id = marker.read_text()
    node = next(n for n in cluster.worker_nodes if n.node_id == node_id)
    cluster.remove_node(node, allow_graceful=False)
    cluster.add_node(num_cpus=4, num_gpus=2)
    return marker.name.split(".", 1)[1]


def test_a_node_lost_before_candidate_code_is_judged_again_once(fleet_cluster, slot, project: Path,
                                                                tmp_path: Path) -> None:
    """The node goes while the judge builds its replica: judged again (attempt 2) on the slot's new node, one row."""
    tree = stub_session(project, "lost-prep", fleet_cluster.address, slot("lostprep:slot-0"))
    commit = candidate(tree, "\n# an idea\n")
    hold = tmp_path / "hold"
    hold.mkdir()
    work = StubWork(str(tmp_path), hold=str(hold), hold_phase="prepare", status="keep")
    codes = []
    run = threading.Thread(target=lambda: codes.append(driver(tree, work, fleet_cluster).experiment("exact", "x")))
    run.start()
    _hold_then(fleet_cluster, hold, "prepare", run)
    run.join(timeout=300)
    assert codes == [0]
    rows = [r for r in ledger_rows(tree) if r.status.is_experiment]
    assert len(rows) == 1 and rows[0].status is Status.KEEP and "attempt 2" in rows[0].flags
    assert json.loads((tree / rows[0].run_dir / "experiment.json").read_text())["fleet"]["attempt"] == 2
    assert [e["attempt"] for e in judged_log(tmp_path)] == [2]  # the first judge never ran the verb
    assert git(tree, "rev-parse", "HEAD") == commit


def test_a_node_lost_after_candidate_code_started_is_a_harness_error_never_the_candidates(
        fleet_cluster, slot, project: Path, tmp_path: Path) -> None:  # noqa: ANN001
    """The node goes while the candidate runs: a harness error named `node-lost`, one line, exit 2; no row, the
    branch not reset, no second judging, the claim released (the agent's next `experiment` sends it again)."""
    from pytest_dit_ar.fleet import index

    tree = stub_session(project, "lost-run", fleet_cluster.address, slot("lostrun:slot-0"))
    commit = candidate(tree, "\n# a node killer\n")
    hold = tmp_path / "hold"
    hold.mkdir()
    work = StubWork(str(tmp_path), hold=str(hold), hold_phase="run", status="keep")
    codes, lines = [], []
    lost = Driver(tree / CONFIG, executor(fleet_cluster, work), out=lines.append, echo=None)
    run = threading.Thread(target=lambda: codes.append(lost.experiment("exact", "x")))
    run.start()
    _hold_then(fleet_cluster, hold, "run", run)
    run.join(timeout=300)
    assert codes == [2]
    assert [x for x in lines if x.startswith("REFUSED")] == lines[-1:] and "harness error" in lines[-1], lines
    assert any(cause in lines[-1] for cause in ("node-lost", "judge-died", "unavailable")), lines[-1]
    assert [r for r in ledger_rows(tree) if r.status.is_experiment] == []
    assert git(tree, "rev-parse", "HEAD") == commit
    assert judged_log(tmp_path) == []  # never finished, never started again
    assert not (tree / ".autoresearch" / "dispatch.json").exists()
    assert [e.event for e in index.entries(lost.repo) if e.commit == commit] == ["claim", "release"]


def test_judges_are_never_retried_by_ray() -> None:
    """Ray's own restarts and task retries are off for judges: the driver's one retry (before candidate code) is
    the only one."""
    options = ray_executor.JudgeActor._default_options
    assert options["max_restarts"] == 0 and options["max_task_retries"] == 0


def test_a_killed_driver_is_reattached_and_its_result_recorded_once(fleet_cluster, slot, project: Path,
                                                                    tmp_path: Path) -> None:
    """The driver is SIGKILLed while the judge runs: the judge goes on; the session's next `status` re-attaches
    and records the verdict once, a second `status` records nothing."""
    from pytest_dit_ar.fleet import route

    tree = stub_session(project, "killed", fleet_cluster.address, slot("killed:slot-0"))
    candidate(tree, "\n# an idea\n")
    hold = tmp_path / "hold"
    hold.mkdir()
    work = StubWork(str(tmp_path), hold=str(hold), hold_phase="run")
    script = (f"from tests.helpers.fleet import StubWork; from pytest_dit_ar.fleet import ray_executor, driver; "
              f"from pathlib import Path; w = StubWork({str(tmp_path)!r}, hold={str(hold)!r}, hold_phase='run'); "
              f"driver.Driver(Path({str(tree / CONFIG)!r}), ray_executor.RayExecutor({fleet_cluster.address!r}, w), "
              f"echo=None).experiment('exact', 'killed driver')")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[2])
    deadline = time.time() + 120
    while not list(hold.glob("run.*")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    assert [r for r in ledger_rows(tree) if r.status.is_experiment] == []
    run_id = next(hold.glob("run.*")).name.split(".", 1)[1]
    route.settle(tree / CONFIG)  # still judging: `status` says so and records nothing
    assert [r for r in ledger_rows(tree) if r.status.is_experiment] == []
    (hold / f"go.{run_id}").write_text("")
    time.sleep(work.sleep_s + 1.0)
    route.settle(tree / CONFIG)
    route.settle(tree / CONFIG)
    rows = [r for r in ledger_rows(tree) if r.status.is_experiment]
    assert [r.run_id for r in rows] == [run_id] and rows[0].status is Status.DISCARD_PERFORMANCE
    assert git(tree, "rev-parse", "HEAD") == rows[0].parent
    assert not (tree / ".autoresearch" / "dispatch.json").exists()


def test_a_write_from_inside_a_ray_worker_refuses(fleet_cluster, slot, project: Path) -> None:
    """git refs, the ledger and the best are written by the session's own process only."""
    tree = stub_session(project, "writer", fleet_cluster.address, slot("writer:slot-0"))

    @ray.remote(num_cpus=0, max_retries=0)
    def write(what: str, root: str) -> str:
        from dit_ar_contract.config import load_config
        from pytest_dit_ar.state import gitops, ledger, records
        from pytest_dit_ar.state.paths import StatePaths
        from pytest_dit_ar.state.session import Session, read_record, slot_target

        repo = gitops.open_repo(Path(root))
        row = ledger.LedgerRow("now", "forged", "lane", "0" * 40, "0" * 40, Status.KEEP)
        try:
            if what == "ledger":
                ledger.append(Path(root) / ".autoresearch" / "results.tsv", row)
            elif what == "ref":
                gitops.set_ref(repo, "refs/autoresearch/x", gitops.head_sha(repo))
            elif what == "reset":
                gitops.reset_to(repo, gitops.head_sha(repo), ("model_under_test/",))
            else:
                config = load_config(Path(root) / CONFIG)
                record = read_record(StatePaths(config.root))
                session = Session(config, config.lane(record.lane), slot_target(record), StatePaths(config.root),
                                  record)
                records.set_best(session, repo, gitops.head_sha(repo), "x", records.Measurements())
        except Refused as exc:
            return str(exc)
        return "written"

    def state() -> tuple:
        ledger = tree / ".autoresearch" / "results.tsv"
        refs = git(tree, "for-each-ref"), git(tree, "rev-parse", "HEAD")
        return (ledger.read_bytes() if ledger.exists() else b"", *refs)

    before = state()
    for what in ("ledger", "ref", "reset", "best"):
        said = ray.get(write.remote(what, str(tree)))
        assert "written by the session's own process only" in said, (what, said)
    assert state() == before


def test_a_duplicate_candidate_is_refused_anywhere_in_the_fleet(fleet_cluster, slot, project: Path,
                                                                 tmp_path: Path) -> None:
    """Session B's candidate has the tree session A already judged against the same best: refused, pointing at
    A's run, nothing sent to a slot."""
    name = slot("dup:slot-0")
    a, b = (stub_session(project, f"dup-{x}", fleet_cluster.address, name) for x in ("a", "b"))
    work = StubWork(str(tmp_path))
    candidate(a, "\n# the same idea\n", "idea in A", unique=False)
    assert driver(a, work, fleet_cluster).experiment("exact", "the same idea") == 1
    candidate(b, "\n# the same idea\n", "idea in B", unique=False)
    with pytest.raises(Refused, match="already judged against the same best") as refused:
        driver(b, work, fleet_cluster).experiment("exact", "the same idea, again")
    earlier = [r for r in ledger_rows(a) if r.status.is_experiment][0]
    assert "session dup-a" in str(refused.value) and earlier.run_id in str(refused.value)
    assert len(judged_log(tmp_path)) == 1 and [r for r in ledger_rows(b) if r.status.is_experiment] == []


# -- one session cannot hurt another on a node ------------------------------------------------------------------------
HOG_LIMIT_MB = 1400.0  # each worker's derived limit on the test's node (its slot's share of it)


@pytest.fixture
def shared_node(fleet_cluster, loop_template: Path, tmp_path: Path):  # noqa: ANN001, ANN201
    """Two real sessions (copies of the baselined embedded session) bound to two CPU slots on one fresh node. The
    node has as many logical CPUs as make a CPU slot's share of it (1 CPU over the node's) give each worker a derived
    limit of about HOG_LIMIT_MB; the cluster's other nodes are held by blockers while the slots are made, so both
    land on it."""
    import dataclasses

    from ray.util.placement_group import placement_group, remove_placement_group

    from pytest_dit_ar.state.executor import ExecutorChoice
    from pytest_dit_ar.state.records import write_session
    from pytest_dit_ar.state.session import open_session
    from pytest_dit_ar.worker import host_limit
    from tests.helpers.loop import clone_state

    cpus = max(2, round(host_limit.machine_mb() * host_limit.HOST_MEMORY_SHARE / HOG_LIMIT_MB))
    blockers = []
    for node in ray.nodes():
        free = node["Resources"].get("CPU", 0.0) if node.get("Alive") else 0.0
        if free:
            blockers.append(placement_group([{"CPU": free}], strategy="STRICT_PACK"))
            ray.get(blockers[-1].ready(), timeout=120)
    node = fleet_cluster.add_node(num_cpus=cpus, num_gpus=0)
    fleet_cluster.wait_for_nodes()
    repos = {}
    try:
        for side in ("hog", "honest"):
            slot = f"mem-{side}:slot-0"
            ray_executor.create_slot(slot, 0, 1.0)
            repo = clone_state(loop_template, tmp_path / side)
            session = open_session(repo / "config" / "autoresearch.json")
            write_session(session, dataclasses.replace(session.started, executor=ExecutorChoice(
                "ray", fleet_cluster.address, slot, slot.split(":")[0])))
            repos[side] = repo
    finally:
        for group in blockers:
            remove_placement_group(group)
    assert {s.node for s in ray_executor.slot_states("mem-")} == {node.node_id}
    yield repos
    for side in repos:
        ray_executor.remove_slot(f"mem-{side}:slot-0")
    fleet_cluster.remove_node(node)


def test_a_memory_hog_in_one_slot_is_its_own_crash_and_the_other_slots_verdict_its_own(shared_node: dict) -> None:
    """Slot A's candidate holds twice its worker's limit while slot B's candidate is judged on the same node: the
    kernel kills A's worker inside its own group (A's CRASH, out of memory, named from the cgroup's oom_kill counter)
    and B's verdict is the one a local run gives (tests/e2e/test_loop.py: brightened outputs are DISCARD-QUALITY,
    decided by its whole corpus run, whatever the load does to timing). No judge is lost."""
    from pytest_dit_ar.loop.speed.patching import wrap_generate
    from pytest_dit_ar.state.runs import RunPaths
    from pytest_dit_ar.worker import cgroup
    from tests.e2e.test_memory_limit import hog
    from tests.helpers.loop import commit_change, experiment, last_line

    hog_repo, honest = shared_node["hog"], shared_node["honest"]
    commit_change(hog_repo, "model_under_test/__init__.py", hog(HOG_LIMIT_MB), "hold twice the limit")
    commit_change(honest, "model_under_test/__init__.py", wrap_generate("q", """\
        out = _gen(requests)
        out.images = (out.images + 0.2).clamp(0, 1)
        return out"""), "brighten the output")
    procs = {}

    def judge(side: str, repo: Path, description: str) -> None:
        procs[side] = experiment(repo, "exact", description)

    threads = [threading.Thread(target=judge, args=("hog", hog_repo, "a memory hog")),
               threading.Thread(target=judge, args=("honest", honest, "brighten the output"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=1800)
    hog_proc, honest_proc = procs["hog"], procs["honest"]
    assert last_line(honest_proc) == "VERDICT: DISCARD-QUALITY" and honest_proc.returncode == 1, \
        honest_proc.stdout[-3000:] + honest_proc.stderr[-2000:]
    assert last_line(hog_proc) == "VERDICT: CRASH" and hog_proc.returncode == 1, \
        hog_proc.stdout[-3000:] + hog_proc.stderr[-2000:]
    row = ledger_rows(hog_repo)[-1]
    assert row.status is Status.CRASH and "out of memory" in row.reason, row.reason
    if cgroup.memory_limit_kind() != "RLIMIT_DATA":
        assert "oom_kill" in (RunPaths(hog_repo / row.run_dir).crash_text() or "")
    assert "psnr_db" in honest_proc.stdout  # judged on its outputs, as a local run is
    assert "harness error" not in hog_proc.stdout + honest_proc.stdout  # neither judge was lost
    assert not any((repo / ".autoresearch" / "dispatch.json").exists() for repo in (hog_repo, honest))
