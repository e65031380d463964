"""examples/cuda-graphs: the patch applies to model_under_test, and its capture logic (static buffers, copy in,
clone out, one graph per signature) is checked on the CPU with the stand-in backend; outputs stay exact."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cuda-graphs"


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


graphs = load("cuda_graphs_example", EXAMPLE / "cuda_graphs.py")


def test_one_capture_per_signature_and_later_calls_copy_into_the_static_buffers() -> None:
    calls: list[torch.Tensor] = []

    def fn(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        calls.append(x)
        return x * 2 + t

    g = graphs.StaticGraph(fn, graphs.EagerBackend(), warmup=2)
    a = g(torch.ones(2, 3), torch.zeros(2, 1))
    b = g(torch.full((2, 3), 5.0), torch.ones(2, 1))
    assert torch.equal(a, torch.full((2, 3), 2.0)) and torch.equal(b, torch.full((2, 3), 11.0))
    assert len(g.graphs) == 1
    graph, static_in, _ = next(iter(g.graphs.values()))
    assert all(x is static_in[0] for x in calls)  # the function only ever saw the static buffer
    assert len(calls) == 2 + 1 + 1 + 1  # 2 warm-ups, the capture, then one replay per call
    assert torch.equal(a, torch.full((2, 3), 2.0))  # the first result was cloned: the replay did not overwrite it
    g(torch.ones(4, 3), torch.zeros(4, 1))  # another batch: another graph
    assert len(g.graphs) == 2


def test_the_patch_applies_and_the_patched_pipeline_is_exact_on_the_cpu(tmp_path: Path) -> None:
    work = tmp_path / "tree"
    shutil.copytree(ROOT / "model_under_test", work / "model_under_test",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    subprocess.run(["git", "apply", str(EXAMPLE / "cuda-graphs.patch")], cwd=work, check=True)
    assert (work / "model_under_test" / "cuda_graphs.py").read_text() == (EXAMPLE / "cuda_graphs.py").read_text()
    spec = {"root": str(ROOT), "lane": "embedded-cpu", "preset": "embedded-digits",
            "weights": str(ROOT / "assets" / "embedded-digits"), "device": "cpu", "resolution": 32, "steps": 4,
            "guidance": 3.0, "batch": 2, "options": {}}
    requests = [("a handwritten digit seven", 11), ("3", 12)]
    saved = {k: v for k, v in sys.modules.items() if k == "model_under_test" or k.startswith("model_under_test.")}
    try:
        for k in saved:
            del sys.modules[k]
        sys.path.insert(0, str(work))
        import model_under_test as patched

        assert Path(patched.__file__).parent == work / "model_under_test"
        plain = patched.build_pipeline(spec)
        assert plain.graphed is None  # on the CPU the candidate runs eager unless asked
        graphed = patched.build_pipeline(dict(spec, options={"cuda_graphs_on_cpu": True}))
        assert graphed.graphed is not None
        want, got = plain.generate(requests), graphed.generate(requests)
        assert len(graphed.graphed.graphs) == 1  # conditional and unconditional passes share one signature
        assert torch.equal(want.latents, got.latents) and torch.equal(want.images, got.images)
        assert graphed.graphed.graphs and next(iter(graphed.graphed.graphs.values()))[0].replays == 2 * 4
    finally:
        sys.path.remove(str(work))
        for k in [k for k in sys.modules if k == "model_under_test" or k.startswith("model_under_test.")]:
            del sys.modules[k]
        sys.modules.update(saved)
