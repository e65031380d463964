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


def test_a_node_lost_after_candidate_code_started_is_a_crash_never_judged_again(fleet_cluster, slot,
                                                                                project: Path, tmp_path: Path) -> None:
    """The node goes while the candidate runs: one CRASH row `node-lost`, the branch reset, no second judging."""
    tree = stub_session(project, "lost-run", fleet_cluster.address, slot("lostrun:slot-0"))
    commit = candidate(tree, "\n# a node killer\n")
    parent = git(tree, "rev-parse", "HEAD^")
    hold = tmp_path / "hold"
    hold.mkdir()
    work = StubWork(str(tmp_path), hold=str(hold), hold_phase="run", status="keep")
    codes = []
    run = threading.Thread(target=lambda: codes.append(driver(tree, work, fleet_cluster).experiment("exact", "x")))
    run.start()
    _hold_then(fleet_cluster, hold, "run", run)
    run.join(timeout=300)
    assert codes == [1]
    rows = [r for r in ledger_rows(tree) if r.status.is_experiment]
    assert len(rows) == 1 and rows[0].status is Status.CRASH and rows[0].reason.startswith("node-lost")
    assert rows[0].commit == commit and git(tree, "rev-parse", "HEAD") == parent
    assert judged_log(tmp_path) == []  # never finished, never started again
    assert not (tree / ".autoresearch" / "dispatch.json").exists()


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
