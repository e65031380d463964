"""The embedded preset: a small class-conditional DiT trained on handwritten digits.

The model denoises in pixel space: "latents" are 1x16x16 images, and decoding only rescales to
[0, 1] and interpolates to the requested resolution (32 by default). The weights and the sampler
are a local diffusers folder named by the lane's ``weights`` (``assets/embedded-digits``:
``transformer/`` is a ``DiTTransformer2DModel`` with 10 digit classes plus the null class used for
classifier-free guidance, ``scheduler/`` is DPM-Solver++ 2M). See docs/models.md.
"""

from __future__ import annotations

from .checkpoints import MissingWeightsError, load_class_conditional_folder
from .pipeline import ClassConditionalPipeline
from .prompts import parse_digit


def build_embedded(spec: dict) -> ClassConditionalPipeline:
    if not spec.get("weights"):
        raise MissingWeightsError("embedded-digits needs the lane's 'weights' to name its diffusers folder "
                                  "(assets/embedded-digits in this repository)")
    transformer, scheduler, vae = load_class_conditional_folder(spec, need_vae=False)
    return ClassConditionalPipeline(
        transformer,
        scheduler,
        vae=vae,
        label_fn=parse_digit,
        device=spec.get("device") or "cpu",
        resolution=spec.get("resolution") or 32,
        steps=spec.get("steps") or 20,
        guidance=spec.get("guidance") if spec.get("guidance") is not None else 3.0,
        spec=spec,
    )
