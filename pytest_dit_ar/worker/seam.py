"""The model seam's contract, checked in the caller's process: what `dit-ar scaffold --custom`'s contract test runs
on a user's own `model_under_test` before the loop ever starts a worker.

The harness calls exactly (docs/design/README.md)::

    pipe = model_under_test.build_pipeline(spec)
    result = pipe.generate([(prompt, seed), ...])
    result.images, result.latents, pipe.components["transformer"]

`check_seam` builds the pipeline from a lane's spec and returns every way it breaks that contract, one line
each, naming what is wrong and how to fix it (an empty list: the seam holds). The worker checks the same shapes
on every generate; the determinism, batch-independence and stage-range checks are what the quality gates and
`dit-ar profile` rely on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

STAGES = ("text_encode", "denoise", "decode")
BATCH_TOLERANCE = 1e-4  # a request's output alone and inside a batch (float32 reductions may reorder)


def spec_from_config(config_path: Path, lane: str | None = None) -> dict[str, Any]:
    """The spec the harness hands `build_pipeline` for a lane of the config (default: its default lane)."""
    from dit_ar_contract.config import load_config

    config = load_config(config_path)
    chosen = config.lane(lane)
    return chosen.workload(config.root)


def _requests(spec: dict[str, Any]) -> list[tuple[str, int]]:
    n = max(2, int(spec.get("batch") or 1))
    return [(f"contract prompt {i}", 1000 + i) for i in range(n)]


def _tensor_problems(torch: Any, name: str, value: Any, n: int, resolution: int | None) -> list[str]:
    if not isinstance(value, torch.Tensor):
        return [f"result.{name} is {type(value).__name__}, not a torch.Tensor: return a GenerationResult whose "
                f"{name} is one tensor for the whole batch"]
    problems = []
    if value.ndim != 4 or value.shape[0] != n:
        want = f"[{n}, 3, H, W]" if name == "images" else f"[{n}, C, h, w]"
        problems.append(f"result.{name} has shape {list(value.shape)}; the seam needs {want} (one row per request)")
    if not value.is_floating_point():
        problems.append(f"result.{name} has dtype {value.dtype}: return floating-point values")
    elif not bool(torch.isfinite(value).all()):
        problems.append(f"result.{name} holds NaN or Inf values")
    if name == "images" and value.ndim == 4:
        if value.shape[1] != 3:
            problems.append(f"result.images has {value.shape[1]} channels: return RGB images, [N, 3, H, W]")
        if resolution and tuple(value.shape[-2:]) != (resolution, resolution):
            problems.append(f"result.images are {value.shape[-2]}x{value.shape[-1]}, the lane's resolution is "
                            f"{resolution}: generate at spec['resolution']")
        if value.is_floating_point() and (float(value.min()) < 0.0 or float(value.max()) > 1.0):
            problems.append(f"result.images range over [{float(value.min()):.3g}, {float(value.max()):.3g}]: the seam "
                            "needs values in [0, 1] (e.g. (x / 2 + 0.5).clamp(0, 1) after a VAE decode)")
    return problems


def _stage_problems(torch: Any, pipe: Any, requests: list[tuple[str, int]]) -> list[str]:
    """The stage ranges one generate opens, seen by wrapping record_function's entry (the profiler's own start-up
    would cost seconds; the names are what `dit-ar profile` later finds in its trace)."""
    from torch.autograd import profiler

    names: list[str] = []
    enter = profiler.record_function.__enter__

    def recording(self: Any) -> Any:
        names.append(self.name)
        return enter(self)

    profiler.record_function.__enter__ = recording
    try:
        with torch.inference_mode():
            pipe.generate(requests)
    finally:
        profiler.record_function.__enter__ = enter
    missing = [s for s in STAGES if s not in names]
    if not missing:
        return []
    return [f"generate() runs no stage range named {', '.join(missing)}: wrap each stage in "
            f"`with torch.profiler.record_function(NAME):` ({', '.join(STAGES)}; a model without a text encoder still "
            "opens an empty text_encode range) so `dit-ar profile` can attribute time"]


def check_seam(build_pipeline: Callable[[dict], Any], spec: dict[str, Any]) -> list[str]:
    """Every way the pipeline `build_pipeline(spec)` breaks the seam (empty: it holds)."""
    import torch

    try:
        pipe = build_pipeline(dict(spec))
    except Exception as exc:
        return [f"build_pipeline(spec) raised {type(exc).__name__}: {exc} (it gets the lane's spec: "
                f"{sorted(spec)})"]
    problems = []
    components = getattr(pipe, "components", None)
    if not isinstance(components, dict) or not isinstance(components.get("transformer"), torch.nn.Module):
        problems.append("pipe.components must be a dict whose 'transformer' entry is the denoiser (a torch.nn.Module): "
                        "the harness counts its forward rows and audits its dtypes")
    if not callable(getattr(pipe, "generate", None)):
        return problems + ["the pipeline has no generate(requests) method"]
    requests = _requests(spec)
    try:
        with torch.inference_mode():
            first = pipe.generate(requests)
            again = pipe.generate(requests)
            alone = pipe.generate(requests[:1])
            other = pipe.generate([(requests[0][0], requests[0][1] + 7)])
    except Exception as exc:
        return problems + [f"generate({requests}) raised {type(exc).__name__}: {exc}"]
    resolution = int(spec["resolution"]) if spec.get("resolution") else None
    shape_problems = []
    for name in ("images", "latents"):
        shape_problems += _tensor_problems(torch, name, getattr(first, name, None), len(requests), resolution)
    problems += shape_problems
    if shape_problems:
        return problems
    if not torch.equal(first.images, again.images) or not torch.equal(first.latents, again.latents):
        problems.append("the same requests gave different outputs twice: draw each request's noise from its own "
                        "torch.Generator seeded with its seed (no global RNG, no state kept between calls)")
    if (alone.images[0] - first.images[0]).abs().max() > BATCH_TOLERANCE:
        problems.append("a request's image alone differs from the same request inside a batch: each row must depend "
                        "on its own (prompt, seed) only (per-request noise, no batch statistics)")
    if torch.equal(other.images[0], alone.images[0]):
        problems.append("two different seeds gave the same image: seed the initial noise with the request's seed")
    try:
        problems += _stage_problems(torch, pipe, requests)
    except Exception as exc:  # the profiler itself failed: say so, the other checks stand
        problems.append(f"the stage ranges could not be profiled ({type(exc).__name__}: {exc})")
    return problems
