"""The CFG-parallel example (examples/cfg-parallel/) on two CPU processes with the gloo backend.

This file starts processes (multiprocessing's spawn), so it lives in the end-to-end tier: the helper rank is the
thing under test. Three processes at most and a tiny DiT: about 11 s on two cores. CI runs the helper's exit when
its parent dies and the patch's freshness; the numerical comparison (9 s of the 11) is in the extended tier.

Tolerances. Each rank runs the same operations on the same shapes as a single process that evaluates the
conditional and the unconditional pass one after the other (the unmodified baseline's CFG), with the same
thread count, so that comparison is bitwise. The batched single-process CFG (one forward on [x; x], the
`01-exact-batch-cfg` patch) runs its GEMMs with twice the rows, which may change blocking and summation
order: there the bound is a relative L2 of 2e-6 (fp32 unit roundoff is 6e-8, and reordering a sum of K terms
typically moves it by about sqrt(K) roundoffs: 1.2e-6 for K = 384, the widest GEMM of this model; measured
about 3e-7), five times below the exact gate's floor of 1e-5 that the harness applies to whole sampling runs.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import runpy
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch

from tests.helpers.loop import PROJECT

EXAMPLE = PROJECT / "examples" / "cfg-parallel"
CONFIG = json.loads((PROJECT / "assets" / "embedded-digits" / "transformer" / "config.json").read_text())
GUIDANCE = 3.0


@pytest.fixture()
def cp(monkeypatch: pytest.MonkeyPatch):
    """The example module, imported by name so that the helper can unpickle its factory."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # both ranks and the reference with one thread each: two cores, no contention
    yield importlib.import_module("cfg_parallel")
    torch.set_num_threads(threads)


def _relative_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _alive(pid: int) -> bool:
    """Running (a zombie has exited; it only waits for a parent that no longer exists to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.extended  # CI's time budget: an example's numerics, not the harness
def test_cfg_parallel_matches_single_process_cfg_and_shuts_down(cp) -> None:
    from diffusers import DiTTransformer2DModel

    torch.manual_seed(0)
    model = DiTTransformer2DModel.from_config(CONFIG).eval().requires_grad_(False)
    channels, null_class = int(CONFIG["in_channels"]), int(CONFIG["num_embeds_ada_norm"])
    labels = torch.tensor([3, 7, 0])
    null = torch.full_like(labels, null_class)
    gen = torch.Generator().manual_seed(1)
    steps = [(torch.randn(3, channels, 16, 16, generator=gen), torch.tensor(t)) for t in (999, 500, 1)]

    def two_pass(net: torch.nn.Module, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        cond, uncond = cp.dit_noise(net, x, t, labels, channels), cp.dit_noise(net, x, t, null, channels)
        return uncond + GUIDANCE * (cond - uncond)

    def batched(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        cond, uncond = cp.dit_noise(model, torch.cat([x, x]), t, torch.cat([labels, null]), channels).chunk(2)
        return uncond + GUIDANCE * (cond - uncond)

    # the helper draws its own weights from seed 1; only the broadcast of rank 0's can make it agree
    own = cp.DiTFromConfig(CONFIG, seed=1)(torch.device("cpu")).module
    par = cp.CFGParallel(cp.DiTFromConfig(CONFIG, seed=1), model, device="cpu")
    pid = par.helper_pid
    try:
        assert par.backend == "gloo" and pid != os.getpid() and _alive(pid)
        with torch.inference_mode():
            for x, t in steps:
                got = par.guided_eps(x, t, lambda x, t=t: cp.dit_noise(model, x, t, labels, channels), GUIDANCE)
                assert got.shape == x.shape and got.dtype == torch.float32
                assert torch.equal(got, two_pass(model, x, t)), f"t={int(t)}: not bitwise the two-pass CFG"
                assert _relative_l2(got, batched(x, t)) <= 2e-6, f"t={int(t)}: off the batched CFG"
                assert _relative_l2(got, two_pass(own, x, t)) > 1e-2  # so the equality above is not vacuous
        assert _alive(pid)  # the helper is reused across steps, not restarted
    finally:
        par.close()
    assert par.helper_exitcode == 0  # it stopped on request, neither terminated nor killed
    assert not _alive(pid) and not Path(f"/proc/{pid}").exists()  # exited and reaped
    assert not torch.distributed.is_initialized()
    with pytest.raises(RuntimeError, match="shut down"):
        par.guided_eps(steps[0][0], steps[0][1], lambda x: x, GUIDANCE)


PARENT = """
import sys, time
sys.path.insert(0, {example!r})
import torch
import cfg_parallel


def factory(device):
    return cfg_parallel.HalfDenoiser(None, lambda x, t: x * 2)


if __name__ == "__main__":
    torch.set_num_threads(1)
    par = cfg_parallel.CFGParallel(factory, None, device="cpu")
    x = torch.ones(2, 1, 4, 4)
    eps = par.guided_eps(x, torch.tensor(5), lambda x: x * 3, 2.0)  # 2 + 2 * (3 - 2)
    assert torch.equal(eps, torch.full_like(x, 4.0)), eps
    open({pidfile!r}, "w").write(str(par.helper_pid))
    time.sleep(300)
"""


def test_helper_exits_when_its_parent_dies(tmp_path: Path) -> None:
    script, pidfile = tmp_path / "parent.py", tmp_path / "helper.pid"
    script.write_text(PARENT.format(example=str(EXAMPLE), pidfile=str(pidfile)))
    parent = multiprocessing.get_context("spawn").Process(target=runpy.run_path, args=(str(script),),
                                                           kwargs={"run_name": "__main__"})
    parent.start()
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() or not pidfile.read_text():
            assert parent.is_alive(), f"the parent process failed (exit code {parent.exitcode})"
            assert time.monotonic() < deadline, "the parent never reported its helper"
            time.sleep(0.05)
        helper = int(pidfile.read_text())
        assert _alive(helper) and helper != parent.pid
        parent.kill()  # SIGKILL: no atexit, no close(); only the helper's own watch can notice
        parent.join(10)
        deadline = time.monotonic() + 10
        while _alive(helper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(helper), "the helper outlived its parent by 10 s"
    finally:
        if parent.is_alive():
            parent.kill()
            parent.join(10)


def test_patch_carries_this_module_and_applies(tmp_path: Path) -> None:
    """The patch adds a copy of cfg_parallel.py: it must be today's copy, and apply to today's model_under_test/,
    alone and on top of the batched-CFG patch of the H200 series (make_patch.py regenerates it)."""
    patch = EXAMPLE / "cfg-parallel.patch"
    assert patch.read_text().startswith("Subject: ")
    for before in ([], [PROJECT / "examples/h200-session/patches/01-exact-batch-cfg.patch"]):
        tree = tmp_path / f"after-{len(before)}"
        shutil.copytree(PROJECT / "model_under_test", tree / "model_under_test",
                        ignore=shutil.ignore_patterns("__pycache__", "weights"))
        for p in [*before, patch]:
            done = subprocess.run(["git", "apply", str(p)], cwd=tree, capture_output=True, text=True)
            assert done.returncode == 0, f"{p.name}: {done.stderr}"
        copied = (tree / "model_under_test/cfg_parallel.py").read_text()
        assert copied == (EXAMPLE / "cfg_parallel.py").read_text(), "stale patch: run make_patch.py"
        pipeline = (tree / "model_under_test/pipeline.py").read_text()
        compile(pipeline, "pipeline.py", "exec")
        assert "self.cfg_parallel.guided_eps(" in pipeline and "cfg_parallel.CFGParallel(" in pipeline
