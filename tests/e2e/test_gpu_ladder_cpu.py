"""examples/gpu-ladder on the CPU: with the whole series applied, the embedded lane's outputs are bit-identical
to the shipped model's (every GPU idea is guarded by the device), and the sampling graph of patch 05, run
through its CPU stand-in on a tiny DiT-XL/2 (DDIM, the lane's scheduler), gives the eager pipeline's outputs,
captures once per batch size and gives fresh outputs for fresh seeds. The stand-in has a CUDA graph's semantics
(host state frozen at capture, outside tensors read by address, a freed one refused), so a graph that reads a
tensor nobody keeps fails here as it fails on the GPU (tests/unit/test_gpu_ladder_patches.py checks that the
series applies). Patch 08 (every block's adaLN modulation computed once a generate) is checked against the model of
01-07 on the same stand-in: within the numerical gate, for fresh seeds and fresh classes, its table read by address
and kept by the pipeline."""

from __future__ import annotations

import gc
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.fidelity import numerical_gate_failures

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


def patched(work: Path, steps: list[str]) -> Path:
    """A copy of model_under_test with the ladder's patches of these steps ("01", ...) applied, in order."""
    shutil.copytree(ROOT / "model_under_test", work / "model_under_test", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    for patch in PATCHES:
        if patch.name[:2] in steps:
            subprocess.run(["git", "apply", str(patch)], cwd=work, check=True)
    return work / "model_under_test"


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory):
    """The shipped model, the model with 01-07 applied (the sampling graph's tests) and the model with the whole
    series, imported side by side."""
    work = tmp_path_factory.mktemp("ladder")
    names = ("mut_shipped", "mut_upto07", "mut_ladder")
    try:
        yield (load_package(names[0], ROOT / "model_under_test"),
               load_package(names[1], patched(work / "upto07", [p.name[:2] for p in PATCHES if p.name[:2] <= "07"])),
               load_package(names[2], patched(work / "all", [p.name[:2] for p in PATCHES])))
    finally:
        for key in [k for k in sys.modules if k.split(".")[0] in names]:
            del sys.modules[key]


@pytest.mark.extended  # diffusers and two builds: 10-30 s on the 2-core VM
def test_the_embedded_lane_is_unchanged_by_the_whole_series(trees) -> None:
    shipped, _, ladder = trees
    requests = [("a handwritten digit seven", 11), ("3", 12)]
    want = shipped.build_pipeline(EMBEDDED).generate(requests)
    pipe = ladder.build_pipeline(EMBEDDED)
    assert pipe.sampling_graph is None and pipe.graphed is None  # nothing graphed on a CPU unless asked
    assert pipe.hoisted_adaln is None
    got = pipe.generate(requests)
    assert torch.equal(want.latents, got.latents) and torch.equal(want.images, got.images)


@pytest.mark.extended
def test_the_sampling_graph_replays_the_eager_loop(trees) -> None:
    _, ladder, _ = trees
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
    _, ladder, _ = trees
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
    _, ladder, _ = trees
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
    _, ladder, _ = trees
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


def rel_l2(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).norm() / want.norm()).item()


# the same seeds twice, fresh seeds of the same classes, fresh classes (one unconditional: the null class only)
HOISTED_REQUESTS = ([("golden retriever", 5), ("tabby", 6)], [("golden retriever", 5), ("tabby", 6)],
                    [("golden retriever", 7), ("tabby", 8)], [("goldfish", 9), ("goldfish", 10)],
                    [("980", 11), ("", 12)])


def assert_same_model(before, after) -> None:
    """after gives before's outputs within the numerical gate, and within 1e-5 (a wrong table row moves them by
    far more), for every batch of HOISTED_REQUESTS in turn."""
    for requests in HOISTED_REQUESTS:
        want, got = before.generate(requests), after.generate(requests)
        assert not numerical_gate_failures(got, want), requests
        assert rel_l2(got.latents, want.latents) < 1e-5 and rel_l2(got.images, want.images) < 1e-5, requests


@pytest.mark.extended
def test_the_hoisted_adaln_under_the_sampling_graph(trees) -> None:
    """08 over 01-07 on the stand-in: the table is written in place before each replay, which reads it by
    address (a table made anew each generate would be freed under the graph, and the stand-in would refuse)."""
    _, upto07, ladder = trees
    spec = dict(TINY_DIT, options={"tiny": True, "cuda_graphs_on_cpu": True})
    before, after = upto07.build_pipeline(spec), ladder.build_pipeline(spec)
    assert after.hoisted_adaln is not None and after.sampling_graph is not None
    table = after.hoisted_adaln.table
    assert_same_model(before, after)
    run = after.sampling_graph.captured[2]
    assert list(after.sampling_graph.captured) == [2] and run.denoise.replays == 1 + len(HOISTED_REQUESTS)
    assert after.hoisted_adaln.table is table and any(ref() is table for ref in run.denoise.inputs)
    # the gate's helper fails outputs that differ (other seeds)
    assert numerical_gate_failures(after.generate(HOISTED_REQUESTS[2]), before.generate(HOISTED_REQUESTS[0]))


@pytest.mark.extended
@pytest.mark.parametrize("upto", ["03", "04"])
def test_the_hoisted_adaln_without_the_sampling_graph(tmp_path: Path, upto: str) -> None:
    """08 where 05 was discarded: the eager loop (two passes a step on the CPU), and 04's graph of the denoiser
    (its CPU stand-in), guided and not."""
    steps = [f"{i:02d}" for i in range(1, int(upto) + 1)]
    names = (f"mut_upto{upto}", f"mut_upto{upto}_08")
    try:
        before = load_package(names[0], patched(tmp_path / "before", steps))
        after = load_package(names[1], patched(tmp_path / "after", [*steps, "08"]))
        for guidance in (4.0, 1.0):
            spec = dict(TINY_DIT, guidance=guidance, options={"tiny": True, "cuda_graphs_on_cpu": True})
            pipe = after.build_pipeline(spec)
            assert pipe.hoisted_adaln is not None and (getattr(pipe, "graphed", None) is not None) == (upto == "04")
            assert_same_model(before.build_pipeline(spec), pipe)
    finally:
        for key in [k for k in sys.modules if k.split(".")[0] in names]:
            del sys.modules[key]


@pytest.mark.extended
def test_a_pair_the_table_was_not_prepared_for_fails_loudly(trees) -> None:
    _, _, ladder = trees
    pipe = ladder.build_pipeline(dict(TINY_DIT, options={"tiny": True, "cuda_graphs_on_cpu": True}))
    pipe.generate([("golden retriever", 5), ("tabby", 6)])  # prepares classes 207, 281 and the null class
    latents = torch.zeros(1, 4, 8, 8)
    first = int(pipe.scheduler.timesteps[0])
    with torch.inference_mode():
        pipe.transformer(latents, timestep=torch.tensor([first]), class_labels=torch.tensor([281]))
        with pytest.raises(IndexError):  # a class no generate prepared
            pipe.transformer(latents, timestep=torch.tensor([first]), class_labels=torch.tensor([0]))
        with pytest.raises(IndexError):  # a timestep outside the schedule
            pipe.transformer(latents, timestep=torch.tensor([first - 1]), class_labels=torch.tensor([281]))
    pipe.generate([("goldfish", 7), ("goldfish", 8)])  # class 1 and the null class now take the first slots
    with torch.inference_mode(), pytest.raises(IndexError):  # the last generate's class no longer maps to a slot
        pipe.transformer(latents, timestep=torch.tensor([first]), class_labels=torch.tensor([281]))
