"""What decides a worker's view before it starts is the same for every side and phase: its sandbox's command line
(binds, environment, descriptor numbers, the process's own command line), on the CPU lane and with a CUDA lane's
settings (GPU device nodes, CUDA variables, the memory cap), for an exec'd worker and a fork server alike; and the
view comparison of tests/helpers/role_view.py replaces exactly the values it names. The real sandboxes:
tests/e2e/test_role_views.py."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest

from dit_ar_contract.device import DeviceIdentity, LaneTarget
from pytest_dit_ar.state.runs import RunPaths
from pytest_dit_ar.worker import sandbox, spawn
from pytest_dit_ar.worker.bootstrap import BOOTSTRAP, worker_sys_path
from pytest_dit_ar.worker.client import SandboxPolicy, WorkerLauncher
from pytest_dit_ar.worker.compile_cache import CompileCaches
from pytest_dit_ar.worker.forkserver import SideZygotes
from tests.helpers import role_view

CPU = LaneTarget("embedded-cpu", "embedded-cpu", "cpu", DeviceIdentity("cpu", name="cpu"), True)
CUDA = LaneTarget("dit-xl", "dit-xl", "cuda:0", DeviceIdentity("cuda", name="NVIDIA RTX A5500", uuid="GPU-1"), True,
                  {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "GPU-1"}, 24.0)
ROLES = (("candidate", "quality"), ("best", "block0"), ("candidate", "cases"), ("best", "cases"),
         ("candidate", "segment3"), ("best", "segment3"))


def project(tmp_path: Path) -> tuple[Path, Path, SandboxPolicy]:
    """A project whose state folder holds both sides' worktrees, and the policy a session gives it."""
    root = tmp_path / "project"
    trees = {}
    for side in ("candidate", "best"):
        tree = root / ".autoresearch" / "worktrees" / side / "model_under_test"
        tree.mkdir(parents=True)
        (tree / "__init__.py").write_text("x = 1\n")
        trees[side] = tree.parent
    policy = SandboxPolicy((root / ".git", root / ".autoresearch", root / "model_under_test"), False, (root,))
    return trees["candidate"], trees["best"], policy


def command(launcher: WorkerLauncher, side: str, root: Path, log: Path, zygote: bool = False) -> str:
    """The bubblewrap command line of a worker (or a fork server) as spawn.launch builds it, its staging folder
    made as launch makes it."""
    w = SideZygotes(launcher, side, root, log.parent).zygotes[0] if zygote else launcher.worker(side, root, log)
    import tempfile

    w.stage = Path(tempfile.mkdtemp(prefix="dit-ar-"))
    w.scratch = w.stage / "scratch"
    try:
        tree = spawn.stage_tree(w)
        cache = spawn.open_cache(w, tree)  # the tree's first worker (cold), a later one (warm), a fork server
        numbers = spawn.fixed_fds() or (3, 4)
        argv = sandbox.command(spawn.sandbox_spec(w, tree, cache), w.argv(BOOTSTRAP), *numbers)
        return role_view.STAGE.sub("/tmp/dit-ar-*", "\0".join(argv))
    finally:
        import shutil

        shutil.rmtree(w.stage)


@pytest.mark.parametrize("target,gpu", [(CPU, False), (CUDA, True)], ids=["cpu-lane", "cuda-lane"])
def test_every_role_gets_the_same_sandbox_and_command_line(tmp_path: Path, target: LaneTarget, gpu: bool) -> None:
    cand, best, policy = project(tmp_path)
    caches = CompileCaches(tmp_path / "project" / ".autoresearch" / "compile-cache")
    launcher = WorkerLauncher(target, 2, 60.0, dataclasses.replace(policy, gpu=gpu), caches)
    run = RunPaths(tmp_path / "project" / ".autoresearch" / "runs" / "r1")
    lines = {f"{side}-{tag}": command(launcher, side, cand if side == "candidate" else best, run.worker_log(side, tag))
             for side, tag in ROLES}
    lines["candidate-forkserver"] = command(launcher, "candidate", cand, run.dir / "x.log", zygote=True)
    lines["best-forkserver"] = command(launcher, "best", best, run.dir / "y.log", zygote=True)
    first = lines["candidate-quality"]
    assert all(line == first for line in lines.values()), {k: v for k, v in lines.items() if v != first}
    assert not re.search(r"candidate|best|quality|block|segment|cases|forkserver|compile-cache", first)
    assert "/tmp/dit-ar-*/cache\0/tmp/dit-ar/cache" in first  # the first worker's cache is a copy like the rest
    if gpu:
        assert "CUDA_VISIBLE_DEVICES\0GPU-1" in first and "--cap-gb\x0024.0" in first


def test_the_import_path_does_not_depend_on_the_sides_tree(tmp_path: Path) -> None:
    cand, best, policy = project(tmp_path)
    inside = best / "lib"
    inside.mkdir()
    import sys

    sys.path.append(str(inside))
    try:
        assert worker_sys_path(cand, policy.hide) == worker_sys_path(best, policy.hide)
        assert str(inside.resolve()) not in worker_sys_path(cand, policy.hide)  # under the hidden state folder
        assert str(inside.resolve()) not in worker_sys_path(best)  # unsandboxed: inside the side's own tree
    finally:
        sys.path.remove(str(inside))


def test_a_staged_tree_has_one_fixed_time(tmp_path: Path) -> None:
    cand, _, policy = project(tmp_path)
    os.utime(cand / "model_under_test" / "__init__.py", (1e9, 1e9))
    w = WorkerLauncher(CPU, 1, 60.0, policy).worker("candidate", cand, tmp_path / "w.log")
    w.stage = tmp_path / "stage"
    tree = spawn.stage_tree(w)
    times = {p.stat().st_mtime for p in [tree, *tree.rglob("*")]}
    assert times == {spawn.STAGED_TIME}


def test_the_comparison_names_what_it_ignores() -> None:
    a = {"fd": {"0": {"target": "pipe:[123]", "flags": "00", "ino": "123", "pos": "0"}},
         "mountinfo": "151 141 254:0 /tmp/dit-ar-abcd1234/tree /tmp/dit-ar/side ro - ext4 /dev/vda rw\n"
                      "152 141 0:61 / /tmp rw - tmpfs tmpfs rw",
         "mounts": "", "cgroup": "0::/../w-0123456789ab\n", "namespaces": {"pid": "pid:[4026532248]"},
         "ids": {"pid": 3, "ppid": 2}, "status": {"Pid": "3", "PPid": "2"}, "procs": {"1": "bwrap"},
         "autogroup": "/autogroup-22 nice 0", "tree": [{"path": ".", "ino": 5, "ctime": 1, "atime": 2, "mtime": 3}],
         "cache": [], "scratch": [], "tmp": [], "dev/shm": []}
    mounts = a["mountinfo"].replace("151 141", "160 150").replace("abcd1234", "zz_y9876").replace("0:61", "0:70")
    b = {**a, "fd": {"0": {"target": "pipe:[999]", "flags": "00", "ino": "999", "pos": "0"}}, "mountinfo": mounts,
         "cgroup": "0::/../w-ba9876543210\n", "namespaces": {"pid": "pid:[4026532300]"},
         "ids": {"pid": 7, "ppid": 2}, "status": {"Pid": "7", "PPid": "2"}, "autogroup": "/autogroup-31 nice 0",
         "tree": [{"path": ".", "ino": 9, "ctime": 4, "atime": 5, "mtime": 3}]}
    assert role_view.differences(role_view.normalise(a), role_view.normalise(b)) == []
    for key, value in (("cgroup", "0::/../candidate-fork-0123456789ab\n"), ("ids", {"pid": 7, "ppid": 1}),
                       ("tree", [{"path": ".", "ino": 9, "ctime": 4, "atime": 5, "mtime": 8}])):
        c = {**b, key: value}
        assert [d.split(":")[0] for d in role_view.differences(role_view.normalise(a), role_view.normalise(c))] \
            == [key]
    log = "worker-best-segment1.log"
    d = {**a, "fd": {"2": {"target": f"/p/.autoresearch/runs/r/{log}", "flags": "01"}}}
    assert role_view.differences(role_view.normalise(a), role_view.normalise(d)) != []
