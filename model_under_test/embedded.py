"""The embedded preset: a small class-conditional DiT trained on handwritten digits.

Data: scikit-learn's 1,797 8x8 handwritten digits (shipped inside the scikit-learn
wheel), upsampled bilinearly to 16x16 and scaled to [-1, 1]. The model denoises in
pixel space: "latents" are 1x16x16 images, and decoding only rescales to [0, 1] and
interpolates to the requested resolution (32 by default).

The denoiser is diffusers' ``DiTTransformer2DModel`` (adaLN-Zero blocks, patch 2,
10 label classes plus the null class used for classifier-free guidance). Weights are
trained by ``model_under_test/train_embedded.py`` and stored in
``model_under_test/weights/embedded_digits.safetensors`` with the architecture and
scheduler settings in ``embedded_digits.json`` next to it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from diffusers import DDPMScheduler, DiTTransformer2DModel, DPMSolverMultistepScheduler
from safetensors.torch import load_file

from .checkpoints import MissingWeightsError
from .pipeline import ClassConditionalPipeline
from .prompts import parse_digit

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
WEIGHTS_FILE = WEIGHTS_DIR / "embedded_digits.safetensors"
CONFIG_FILE = WEIGHTS_DIR / "embedded_digits.json"

NUM_CLASSES = 10
LATENT_SIZE = 16

# Architecture: 4 blocks x 96 wide (4 heads x 24), patch 2 -> 64 tokens per image.
TRANSFORMER_CONFIG = dict(
    num_attention_heads=4,
    attention_head_dim=24,
    in_channels=1,
    out_channels=1,
    num_layers=4,
    sample_size=LATENT_SIZE,
    patch_size=2,
    num_embeds_ada_norm=NUM_CLASSES,
    norm_type="ada_norm_zero",
)

# Noise schedule shared by training (DDPM) and sampling (DPM-Solver++ 2M).
NOISE_SCHEDULE = dict(num_train_timesteps=1000, beta_schedule="squaredcos_cap_v2", prediction_type="epsilon")
# Sampler: DPM-Solver++ (2M), 20 steps in the lane. The cosine schedule ends at
# alpha_bar ~ 0, where an epsilon model's implied clean image x0 = (x - sigma*eps)/alpha
# is amplified ~10^4-fold: sampling from t=999 turns rounding noise into visible pixel
# differences and, unclipped, into saturated noise. So the timesteps use "leading"
# spacing (20 steps: the first is t=941, alpha ~ 0.09) and x0 is clipped to the data range
# [-1, 1] (Imagen-style thresholding with a fixed bound of 1.0).
SAMPLER_CONFIG = dict(NOISE_SCHEDULE, algorithm_type="dpmsolver++", solver_order=2,
                      timestep_spacing="leading", steps_offset=1, thresholding=True, sample_max_value=1.0)


def make_transformer(config: dict | None = None) -> DiTTransformer2DModel:
    return DiTTransformer2DModel(**(config or TRANSFORMER_CONFIG))


def make_training_scheduler() -> DDPMScheduler:
    return DDPMScheduler(**NOISE_SCHEDULE)


def make_sampler(config: dict | None = None) -> DPMSolverMultistepScheduler:
    return DPMSolverMultistepScheduler(**(config or SAMPLER_CONFIG))


def load_embedded(device="cpu", weights_file: Path = WEIGHTS_FILE, config_file: Path = CONFIG_FILE):
    """The trained transformer and its sampler, from the files shipped in the package."""
    for path in (weights_file, config_file):
        if not Path(path).is_file():
            raise MissingWeightsError(
                f"embedded-digits expects {Path(path).name} at {path}; it is produced by "
                "model_under_test/train_embedded.py and committed with the package "
                "(weights are never downloaded)"
            )
    meta = json.loads(Path(config_file).read_text())
    transformer = make_transformer(meta["transformer"])
    state = load_file(str(weights_file))
    transformer.load_state_dict({k: v.float() for k, v in state.items()})
    transformer.to(device).eval().requires_grad_(False)
    return transformer, make_sampler()


def build_embedded(spec: dict) -> ClassConditionalPipeline:
    device = spec.get("device") or "cpu"
    if spec.get("weights"):
        from .checkpoints import load_class_conditional_folder

        transformer, scheduler, vae = load_class_conditional_folder(spec, need_vae=False)
    else:
        transformer, scheduler = load_embedded(device)
        vae = None
    return ClassConditionalPipeline(
        transformer,
        scheduler,
        vae=vae,
        label_fn=parse_digit,
        device=device,
        resolution=spec.get("resolution") or 32,
        steps=spec.get("steps") or 20,
        guidance=spec.get("guidance") if spec.get("guidance") is not None else 3.0,
        spec=spec,
    )
