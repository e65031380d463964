"""examples/cuda-graphs: the patch applies to model_under_test, and the patched embedded pipeline, with the CPU
stand-in for CUDA graphs (they do not exist on a CPU), gives bit-identical outputs (the candidate is exact)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cuda-graphs"


@pytest.mark.extended  # 23-47 s on the 2-core VM (diffusers import, two builds); the patch's check runs in tests/unit
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
