"""Fixtures for the project's own tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_dit_ar.loop.speed import warm_servers
from pytest_dit_ar.state.paths import StatePaths
from tests.helpers.loop import clone_state, make_project_copy, run


def stop_warm_servers(under: Path) -> None:
    """End the warm fork servers' keepers of the projects under `under` (lane setting performance.warm_servers: a
    keeper otherwise waits an hour for an experiment that never comes)."""
    for state in (*under.glob("*/.autoresearch"), *under.glob("*/*/.autoresearch")):
        warm_servers.stop(StatePaths(state.parent))


@pytest.fixture(autouse=True)
def _no_warm_servers_left(tmp_path: Path):  # noqa: ANN202 - a generator fixture
    yield
    stop_warm_servers(tmp_path)


@pytest.fixture(scope="session")
def loop_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project copy with an initialised session and a baseline of the embedded-cpu lane (no warm servers: a copy
    of its state names this folder, so a clone never adopts them)."""
    repo = make_project_copy(tmp_path_factory.mktemp("template") / "repo")
    run(repo, "init", "--tag", "t1", "--lane", "embedded-cpu", check=True)
    run(repo, "baseline", "--quiet", check=True)
    warm_servers.stop(StatePaths(repo))
    return repo


@pytest.fixture
def loop_repo(loop_template: Path, tmp_path: Path) -> Path:
    """A private copy of the prepared template for one test."""
    return clone_state(loop_template, tmp_path / "repo")


@pytest.fixture(scope="session")
def fleet_cluster(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - a ray.cluster_utils.Cluster
    """A local Ray cluster of a head (no CPU, no GPU: nothing is placed on it) and two nodes of 4 logical CPUs and
    2 fake GPUs each (Ray counts them and sets CUDA_VISIBLE_DEVICES; nothing here uses a GPU). Replicas go to a
    temporary folder. Connected in the fleet's namespace, as a driver connects."""
    import os

    from tests.helpers.ray_required import require_ray

    require_ray()
    from ray.cluster_utils import Cluster

    from pytest_dit_ar.fleet import ray_executor

    os.environ["DIT_AR_REPLICAS"] = str(tmp_path_factory.mktemp("replicas"))  # before the nodes start
    os.environ.setdefault("RAY_prestart_worker_first_driver", "0")  # no idle workers on 2 cores
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "num_gpus": 0,
                                                           "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=4, num_gpus=2)
    cluster.wait_for_nodes()
    ray_executor.connect(cluster.address)
    yield cluster
    import ray

    ray.shutdown()
    cluster.shutdown()
