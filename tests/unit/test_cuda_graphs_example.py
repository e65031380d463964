"""examples/cuda-graphs: its capture logic (static buffers, copy in, clone out, one graph per signature), checked
on the CPU with the stand-in backend (tests/e2e/test_cuda_graphs_example.py applies the patch and checks that
the patched pipeline's outputs are exact)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
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


def test_the_patch_applies_to_model_under_test(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "model_under_test", tmp_path / "model_under_test",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply", str(EXAMPLE / "cuda-graphs.patch")], cwd=tmp_path, check=True)
    pipeline = (tmp_path / "model_under_test" / "pipeline.py").read_text()
    assert "self.graphed = StaticGraph(" in pipeline and "if self.graphed is not None:" in pipeline
    assert (tmp_path / "model_under_test" / "cuda_graphs.py").read_text() == (EXAMPLE / "cuda_graphs.py").read_text()
