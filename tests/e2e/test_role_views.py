"""No worker can tell its side (candidate or best) or its phase (quality run, further cases, the best's first
worker, a timed segment) from what its sandbox shows: a probe in model_under_test/ (tests/helpers/role_view.py) runs
in every kind of worker the harness starts, through the session's own launcher and the names the harness gives
their logs, exec'd and forked from the fork servers, on the CPU lane and with a CUDA lane's sandbox settings (the
GPU device nodes bound, the CUDA variables); its views are equal once the values
`role_view.PER_WORKER` names are replaced. docs/design/sandbox-and-security.md lists the channels."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from dit_ar_contract.errors import CandidateCrash
from pytest_dit_ar.loop.workers.launch import launcher_for
from pytest_dit_ar.state.runs import RunPaths
from pytest_dit_ar.state.session import Session, open_session
from pytest_dit_ar.worker.client import WorkerLauncher, WorkerProcess
from pytest_dit_ar.worker.forkserver import ForkServers
from tests.helpers import role_view
from tests.helpers.loop import make_project_copy
from tests.helpers.sandbox_required import require_sandbox

pytestmark = pytest.mark.slow
PROBE_INIT = "from .role_view import dump\n\n\ndef build_pipeline(spec):\n    dump()\n    raise RuntimeError('probe')\n"
# what a view must never contain: the names of the logs and the state the harness keeps by side and phase
TELLTALES = ("worker-", "forkserver-", ".log", "compile-cache", "-quality", "block0", "segment", "-cases",
             "worktrees", "candidate", "best")
CHANNELS = ("fd", "mountinfo", "mounts", "cgroup", "environ", "cmdline", "cwd", "procs", "tree", "cache", "scratch",
            "tmp", "dev/shm")  # where a host path or a name could show


def probe_trees(repo: Path) -> tuple[Path, Path]:
    """Both sides' worktrees, holding the probe (the same tree, as in an A/A)."""
    session = open_session(repo / "config" / "autoresearch.json", need_session=False)
    roots = (session.paths.candidate_worktree, session.paths.best_worktree)
    for root in roots:
        model = root / "model_under_test"
        model.mkdir(parents=True)
        (model / "role_view.py").write_text(role_view.PROBE)
        (model / "__init__.py").write_text(PROBE_INIT)
    return roots


def view_of(worker: WorkerProcess) -> dict:
    """Build the probe (it writes its view to stderr, then fails on purpose) and read the view from the log."""
    try:
        worker.handshake()
        worker.request("build", spec={})
    except CandidateCrash:
        pass
    worker.close()
    view = role_view.parse_log(worker.log_path)
    assert view is not None, worker.log_path.read_text()[-2000:]
    raw = json.dumps({k: view[k] for k in CHANNELS})
    assert not [t for t in TELLTALES if t in raw], (worker.log_path.name, [t for t in TELLTALES if t in raw])
    return view


def views(launcher: WorkerLauncher, cand: Path, best: Path, run: RunPaths, exec_d: tuple[tuple[str, str], ...],
          forks_per_side: int, segments: int) -> dict[str, dict]:
    """The views of the exec'd workers named (side, phase) and of `segments` forked pairs."""
    roots = {"candidate": cand, "best": best}
    found = {}
    for side, tag in exec_d:
        found[f"{side}-{tag}"] = view_of(launcher.worker(side, roots[side], run.worker_log(side, tag)).spawn())
    forks = ForkServers(launcher, cand, best, run.dir, forks_per_side).spawn().ready()
    try:
        for i in range(2, 2 + segments):
            pair = forks.fork_pair(f"segment{i}")
            found[f"candidate-segment{i}"], found[f"best-segment{i}"] = view_of(pair[0]), view_of(pair[1])
    finally:
        forks.close()
    return found


def assert_same(found: dict[str, dict]) -> None:
    names = sorted(found)
    first = role_view.normalise(found[names[0]])
    for name in names[1:]:
        assert role_view.differences(first, role_view.normalise(found[name])) == [], (names[0], name)


def probe_session(tmp_path: Path) -> tuple[Session, WorkerLauncher, Path, Path]:
    require_sandbox()
    repo = make_project_copy(tmp_path / "repo")
    cand, best = probe_trees(repo)
    session = open_session(repo / "config" / "autoresearch.json", need_session=False)
    return session, launcher_for(session), cand, best


@pytest.mark.extended  # seven sandboxed workers (a minute or two): left out of CI's 15 minutes, run before a merge
def test_workers_of_every_role_and_phase_see_the_same_room(tmp_path: Path) -> None:
    session, launcher, cand, best = probe_session(tmp_path)
    run = RunPaths(session.paths.run("probe"))
    cpu = views(launcher, cand, best, run, (("candidate", "quality"), ("best", "block0"), ("candidate", "cases")),
                session.lane.performance.fork_servers(False), 2)
    assert len(cpu) == 7
    assert_same(cpu)
    shutil.rmtree(session.paths.dir / "worktrees")


@pytest.mark.extended
def test_a_cuda_lanes_sandbox_shows_every_role_the_same_room(tmp_path: Path) -> None:
    """The same with a CUDA lane's sandbox settings: the GPU device nodes (none on this machine) and the CUDA
    variables."""
    session, launcher, cand, best = probe_session(tmp_path)
    target = dataclasses.replace(launcher.target, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                                                       "CUDA_VISIBLE_DEVICES": "GPU-00000000-0000-0000-0000-0"})
    assert launcher.sandbox is not None
    gpu_launcher = WorkerLauncher(target, launcher.threads, launcher.timeout_s,
                                  dataclasses.replace(launcher.sandbox, gpu=True), launcher.caches, launcher.mutable)
    gpu = views(gpu_launcher, cand, best, RunPaths(session.paths.run("probe-gpu")), (("candidate", "quality"),), 1, 1)
    assert len(gpu) == 3
    assert_same(gpu)
    assert gpu["candidate-quality"]["os.environ"]["CUDA_VISIBLE_DEVICES"].startswith("GPU-")
    shutil.rmtree(session.paths.dir / "worktrees")
