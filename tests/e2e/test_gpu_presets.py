"""GPU presets at full size on a CUDA GPU (skipped without one; run on the device machine), held to the
published sizes of tests/helpers/presets.py."""

from __future__ import annotations

import sys
import time

import pytest
import torch

from tests.helpers.presets import DIT_SPEC, PIXART_SPEC, ROOT, reduced_forward

if str(ROOT) not in sys.path:  # the mutable package is imported from the project root
    sys.path.insert(0, str(ROOT))

import model_under_test  # noqa: E402

# ------------------------------------------------------------------ full width, one block, on the CPU

@pytest.mark.parametrize("spec,prompts", [
    (dict(DIT_SPEC, options={"num_layers": 1}), ["pizza", ""]),
    (dict(PIXART_SPEC, options={"num_layers": 1, "text_encoder": "t5-small"}), ["a cat"]),
], ids=["dit-1-layer", "pixart-1-layer"])
def test_full_width_block_forward_on_cpu(spec, prompts):
    """The published width with one transformer block (the tiny variants run in the unit tier)."""
    reduced_forward(model_under_test, spec, prompts)


# ------------------------------------------------------------------ full size, CUDA only

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU (torch.cuda.is_available() is False)")


def _cuda_profile(spec: dict, requests: list[tuple[str, int]]) -> dict:
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    pipe = model_under_test.build_pipeline(spec)
    torch.cuda.synchronize()
    build_s = time.perf_counter() - t0
    weights_gb = torch.cuda.memory_allocated() / 2**30
    few = 2

    def timed(steps: int) -> tuple[float, object]:
        pipe.steps = steps
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = pipe.generate(requests)
        torch.cuda.synchronize()
        return time.perf_counter() - start, result

    timed(few)  # warm-up
    torch.cuda.reset_peak_memory_stats()
    t_few, _ = timed(few)
    t_full, out = timed(spec["steps"])
    per_step_ms = (t_full - t_few) / (spec["steps"] - few) * 1000
    report = {
        "preset": spec["preset"], "device": torch.cuda.get_device_name(), "batch": len(requests),
        "steps": spec["steps"], "build_s": round(build_s, 1), "weights_gb": round(weights_gb, 2),
        "generate_s": round(t_full, 3), "per_step_ms": round(per_step_ms, 2),
        "fixed_cost_ms": round((t_full * 1000 - per_step_ms * spec["steps"]), 1),
        "peak_allocated_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "peak_reserved_gb": round(torch.cuda.max_memory_reserved() / 2**30, 2),
    }
    print("\n" + " ".join(f"{k}={v}" for k, v in report.items()))
    assert out.images.shape[0] == len(requests)
    assert torch.isfinite(out.latents).all(), "non-finite latents"
    assert torch.isfinite(out.images).all()
    return report


@pytest.mark.cuda
@needs_cuda
def test_dit_xl2_full_size_cuda():
    report = _cuda_profile(DIT_SPEC, [("golden retriever", 2001), ("tabby", 2002)])
    assert report["peak_allocated_gb"] < 24


@pytest.mark.cuda
@needs_cuda
def test_pixart_sigma_full_size_cuda():
    report = _cuda_profile(PIXART_SPEC, [("a red bicycle leaning against a brick wall", 3001)])
    assert report["peak_allocated_gb"] < 24
