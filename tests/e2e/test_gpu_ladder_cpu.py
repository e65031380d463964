"""examples/gpu-ladder on the CPU: with the whole series applied, the embedded lane's outputs are bit-identical
to the shipped model's (every GPU idea is guarded by the device), and the sampling graph of patch 05, run
through its CPU stand-in on a tiny DiT-XL/2 (DDIM, the lane's scheduler), gives the eager pipeline's outputs,
captures once per batch size and gives fresh outputs for fresh seeds. The stand-in has a CUDA graph's semantics
(host state frozen at capture, outside tensors read by address, a freed one refused), so a graph that reads a
tensor nobody keeps fails here as it fails on the GPU (tests/unit/test_gpu_ladder_patches.py checks that the
series applies)."""

from __future__ import annotations

import gc
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
PATCHES = sorted((ROOT / "examples" / "gpu-ladder" / "patches").glob("*.patch"))
EMBEDDED = {"root": str(ROOT), "lane": "embedded-cpu", "preset": "embedded-digits",
            "weights": str(ROOT / "assets" / "embedded-digits"), "device": "cpu", "resolution": 32, "steps": 4,
            "guidance": 3.0, "batch": 2, "options": {}}
TINY_DIT = {"root": str(ROOT), "lane": "dit-xl2-256", "preset": "dit-xl-2-256", "weights": None, "device": "cpu",
            "resolution": 64, "steps": 4, "guidance": 4.0, "batch": 2, "options": {"tiny": True}}


def load_package(name: str, folder: Path):
    """Import a model_under_test folder under its own package name (two trees side by side in one process)."""
    spec = importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory):
    """The shipped model and the model with every ladder patch applied, imported side by side."""
    work = tmp_path_factory.mktemp("ladder")
    shutil.copytree(ROOT / "model_under_test", work / "model_under_test", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    for patch in PATCHES:
        subprocess.run(["git", "apply", str(patch)], cwd=work, check=True)
    try:
        shipped = load_package("mut_shipped", ROOT / "model_under_test")
        yield shipped, load_package("mut_ladder", work / "model_under_test")
    finally:
        for key in [k for k in sys.modules if k.split(".")[0] in ("mut_shipped", "mut_ladder")]:
            del sys.modules[key]


@pytest.mark.extended  # diffusers and two builds: 10-30 s on the 2-core VM
def test_the_embedded_lane_is_unchanged_by_the_whole_series(trees) -> None:
    shipped, ladder = trees
    requests = [("a handwritten digit seven", 11), ("3", 12)]
    want = shipped.build_pipeline(EMBEDDED).generate(requests)
    pipe = ladder.build_pipeline(EMBEDDED)
    assert pipe.sampling_graph is None and pipe.graphed is None  # nothing graphed on a CPU unless asked
    got = pipe.generate(requests)
    assert torch.equal(want.latents, got.latents) and torch.equal(want.images, got.images)


@pytest.mark.extended
def test_the_sampling_graph_replays_the_eager_loop(trees) -> None:
    _, ladder = trees
    unguided = dict(TINY_DIT, guidance=1.0)  # one pass a step on both paths: the same calls, bit for bit
    eager = ladder.build_pipeline(unguided)
    graphed = ladder.build_pipeline(dict(unguided, options={"tiny": True, "cuda_graphs_on_cpu": True}))
    assert eager.sampling_graph is None and graphed.sampling_graph is not None
    requests = [("golden retriever", 5), ("tabby", 6)]
    want, got = eager.generate(requests), graphed.generate(requests)
    assert torch.equal(got.latents, want.latents) and torch.equal(got.images, want.images)
    again = graphed.generate(requests)
    fresh = graphed.generate([("golden retriever", 7), ("tabby", 8)])
    run = graphed.sampling_graph.captured[2]
    assert list(graphed.sampling_graph.captured) == [2]  # one capture for the batch size
    assert run.denoise.replays == 1 + 3 and run.decode.replays == 3  # the capture's own replay, then one a call
    assert not torch.equal(fresh.latents, got.latents)  # new seeds, new noise in the static buffer
    assert torch.equal(fresh.latents, eager.generate([("golden retriever", 7), ("tabby", 8)]).latents)
    # the outputs are clones: a later replay overwrites the static buffers, not what a caller kept
    assert torch.equal(again.latents, got.latents) and torch.equal(again.images, got.images)
    assert torch.equal(run.latents, fresh.latents) and run.latents.data_ptr() != fresh.latents.data_ptr()


@pytest.mark.extended
def test_the_sampling_graph_with_guidance(trees) -> None:
    _, ladder = trees
    eager = ladder.build_pipeline(TINY_DIT)
    graphed = ladder.build_pipeline(dict(TINY_DIT, options={"tiny": True, "cuda_graphs_on_cpu": True}))
    requests = [("golden retriever", 5), ("tabby", 6)]
    want, got = eager.generate(requests), graphed.generate(requests)
    # the graph batches the two guidance passes where the CPU's eager loop runs them one after the other (patch
    # 01 batches them on CUDA only): the same arithmetic per row, up to the last bits of a CPU GEMM's blocking,
    # which 4 DDIM steps amplify to about 1e-5
    torch.testing.assert_close(got.latents, want.latents, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got.images, want.images, rtol=1e-4, atol=1e-4)


@pytest.mark.extended
def test_the_stand_in_replays_what_a_cuda_graph_replays(trees) -> None:
    _, ladder = trees
    backend = ladder.sampling_graph.RecordedGraphs()
    static, state = torch.ones(3), {"scale": 2.0}

    def fn() -> torch.Tensor:
        return static * state["scale"] + torch.arange(3.0)

    graph, out = backend.capture(fn, warmup=1)
    assert torch.equal(out, torch.tensor([2.0, 3.0, 4.0]))
    static.copy_(torch.full((3,), 10.0))  # a static input's new contents are read at the next replay
    state["scale"] = 100.0  # Python state is frozen at capture: the replay still multiplies by 2
    graph.replay()
    assert torch.equal(out, torch.tensor([20.0, 21.0, 22.0])) and graph.replays == 1


@pytest.mark.extended
def test_the_stand_in_refuses_a_graph_whose_input_was_freed(trees) -> None:
    """What sank the first device run of the sampling graph: each step's timestep batch was made on the device
    before the capture and kept only by the captured function, so it was freed after the capture and its memory
    reused; every later replay read garbage timesteps (latent rel. L2 0.25 on the H100)."""
    _, ladder = trees
    backend = ladder.sampling_graph.RecordedGraphs()

    def capture():
        rows = [torch.full((4,), t) for t in (999, 874)]  # made before the capture, held by the closure only

        def fn() -> torch.Tensor:
            return sum(r.float() for r in rows)

        return backend.capture(fn, warmup=1)

    graph, out = capture()
    gc.collect()
    with pytest.raises(RuntimeError, match="freed after the capture"):
        graph.replay()
