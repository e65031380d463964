"""model_under_test: the MUTABLE inference pipeline the research loop optimises.

The fixed harness calls exactly::

    pipe = model_under_test.build_pipeline(spec)
    result = pipe.generate([(prompt, seed), ...])
    result.images, result.latents, pipe.components["transformer"]

``spec`` keys: root, lane, preset, weights, device, resolution, steps, guidance, batch,
options, gpus. See docs/models.md for the presets and their options.

Shapes are fixed per lane: every ``generate`` gets exactly ``spec["batch"]`` requests at the lane's
resolution and steps (the harness pads the corpus to full batches), so a CUDA graph or a compiled graph
captured on the first call of a signature serves every later call. Capture lazily (the harness's warm-up
rounds run until the round time is steady), copy each call's inputs into static buffers and clone the
outputs after replay (examples/cuda-graphs/, handbook/03_single_gpu/05_cuda_graphs_and_shape_buckets.md).
Compile caches are the harness's: each tree gets its own TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR.
"""

from __future__ import annotations

from .pipeline import GenerationResult

PRESETS = ("embedded-digits", "dit-xl-2-256", "pixart-sigma-1024")

__all__ = ["PRESETS", "GenerationResult", "build_pipeline"]


def build_pipeline(spec: dict):
    """Build the pipeline for ``spec["preset"]`` (default: embedded-digits)."""
    spec = dict(spec)
    spec.setdefault("options", {})
    spec["options"] = dict(spec["options"] or {})
    preset = spec.get("preset") or "embedded-digits"
    if preset == "embedded-digits":
        from .embedded import build_embedded

        return build_embedded(spec)
    if preset == "dit-xl-2-256":
        from .presets import build_dit_xl2

        return build_dit_xl2(spec)
    if preset == "pixart-sigma-1024":
        from .presets import build_pixart_sigma

        return build_pixart_sigma(spec)
    raise ValueError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
