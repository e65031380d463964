"""GPU presets: the published architectures with seeded random weights.

* ``dit-xl-2-256`` -- DiT-XL/2 (28 blocks, 1152 wide, 16 heads x 72, patch 2) on 4x32x32
  latents, 1000 ImageNet classes + null class, an SD-VAE-layout ``AutoencoderKL``
  (scaling 0.18215) and DDIM with the facebook/DiT-XL-2-256 scheduler settings.
* ``pixart-sigma-1024`` -- PixArt-Sigma XL/2 at 1024 (``PixArtTransformer2DModel``,
  28 x 1152, cross-attention to 4096-d T5 features, 300 tokens, no micro-conditions),
  SDXL-VAE-layout ``AutoencoderKL`` (scaling 0.13025), a T5 v1.1 encoder built from a
  ``T5Config`` (T5-XXL by default) and DPM-Solver++ (diffusers' defaults, as in the
  diffusers conversion script).

Random weights give the same compute, memory traffic and shapes as the real checkpoints,
so speed work and fidelity-to-baseline gates are meaningful; what the images *show* is
noise, so task-quality scores are not. Every component is built directly on the target
device and dtype (``meta`` works too) after ``torch.manual_seed``, so the weights are
deterministic for a given device and software stack.

``spec["options"]`` knobs (all optional):
  ``dtype``          float32 | bfloat16 | float16 (DiT default float32; PixArt default
                     bfloat16 on CUDA, float32 elsewhere; PixArt's VAE stays float32)
  ``num_layers``     transformer depth (default 28)
  ``tiny``           true: a narrow model (2 heads x 16, 2 layers, small VAE and T5)
                     for CPU smoke tests; same code paths, not the same compute
  ``text_encoder``   t5-xxl (default) | t5-xl | t5-large | t5-base | t5-small | t5-tiny
                     (the caption projection's input width follows the encoder width)
  ``max_sequence_length``  PixArt prompt length in tokens (default 300)
  ``seed``           base seed for the random weights (default 0)
With ``spec["weights"]`` set, the components are loaded from that local folder instead.
"""

from __future__ import annotations

import contextlib

import torch
from diffusers import (
    AutoencoderKL,
    DDIMScheduler,
    DiTTransformer2DModel,
    DPMSolverMultistepScheduler,
    PixArtTransformer2DModel,
)

from .checkpoints import load_class_conditional_folder, load_text_to_image_folder, torch_dtype
from .pipeline import ClassConditionalPipeline, TextToImagePipeline
from .prompts import HashTokenizer, parse_imagenet_class

# facebook/DiT-XL-2-256 scheduler/scheduler_config.json (diffusers 0.12): DDIM, linear betas.
DIT_SCHEDULER = dict(
    num_train_timesteps=1000, beta_start=0.0001, beta_end=0.02, beta_schedule="linear",
    clip_sample=False, set_alpha_to_one=True, steps_offset=0, prediction_type="epsilon",
)

# T5 v1.1 encoder sizes (gated-GELU feed-forward, d_kv 64, vocabulary 32128).
T5_SIZES = {
    "t5-xxl": dict(d_model=4096, d_ff=10240, num_heads=64, num_layers=24),
    "t5-xl": dict(d_model=2048, d_ff=5120, num_heads=32, num_layers=24),
    "t5-large": dict(d_model=1024, d_ff=2816, num_heads=16, num_layers=24),
    "t5-base": dict(d_model=768, d_ff=2048, num_heads=12, num_layers=12),
    "t5-small": dict(d_model=512, d_ff=1024, num_heads=6, num_layers=8),
    "t5-tiny": dict(d_model=32, d_ff=64, num_heads=2, num_layers=2),
}

# PixArt position-embedding interpolation by resolution (PixArt-sigma inference script).
PIXART_INTERPOLATION = {256: 0.5, 512: 1, 1024: 2, 2048: 4}


@contextlib.contextmanager
def build_on(device, dtype: torch.dtype, seed: int):
    """Create parameters directly on ``device`` in ``dtype``, with seeded initialisation."""
    old = torch.get_default_dtype()
    torch.manual_seed(seed)
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(old)


def _finish(module, device, dtype):
    """Move to ``device``; cast stray tensors (e.g. float32 position tables) to ``dtype``."""
    for sub in module.modules():
        for name, t in list(sub._parameters.items()):
            if t is not None and t.is_floating_point() and t.dtype != dtype:
                sub._parameters[name] = torch.nn.Parameter(t.to(dtype), requires_grad=False)
        for name, t in list(sub._buffers.items()):
            if t is not None and t.is_floating_point() and t.dtype != dtype:
                sub._buffers[name] = t.to(dtype)
    return module.to(device=device).eval().requires_grad_(False)


def sd_vae(resolution: int, scaling_factor: float, tiny: bool = False, **extra) -> AutoencoderKL:
    """AutoencoderKL with the Stable Diffusion VAE layout (8x down-sampling, 4 channels)."""
    if tiny:
        return AutoencoderKL(
            down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
            block_out_channels=[16, 16, 32, 32], layers_per_block=1, norm_num_groups=8,
            latent_channels=4, sample_size=resolution, scaling_factor=scaling_factor, **extra,
        )
    return AutoencoderKL(
        in_channels=3, out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
        block_out_channels=[128, 256, 512, 512], layers_per_block=2, act_fn="silu",
        latent_channels=4, norm_num_groups=32, sample_size=resolution, scaling_factor=scaling_factor, **extra,
    )


def _common(spec: dict, default_res: int, default_steps: int, default_guidance: float):
    options = spec.get("options") or {}
    device = spec.get("device") or "cuda"
    resolution = int(spec.get("resolution") or default_res)
    if resolution % 16:
        raise ValueError(f"resolution {resolution} must be a multiple of 16 (8x VAE, patch 2)")
    guidance = spec.get("guidance")
    return options, device, resolution, dict(
        device=device, resolution=resolution, steps=int(spec.get("steps") or default_steps),
        guidance=float(default_guidance if guidance is None else guidance), spec=spec,
    )


# --------------------------------------------------------------------------- DiT-XL/2

def dit_xl2_config(sample_size: int = 32, num_layers: int = 28, tiny: bool = False) -> dict:
    heads, head_dim = (2, 16) if tiny else (16, 72)
    return dict(
        num_attention_heads=heads, attention_head_dim=head_dim, in_channels=4, out_channels=8,
        num_layers=num_layers, sample_size=sample_size, patch_size=2, num_embeds_ada_norm=1000,
        norm_type="ada_norm_zero", activation_fn="gelu-approximate", norm_elementwise_affine=False,
    )


def build_dit_xl2(spec: dict) -> ClassConditionalPipeline:
    options, device, resolution, common = _common(spec, 256, 25, 4.0)
    if spec.get("weights"):
        transformer, scheduler, vae = load_class_conditional_folder(spec, need_vae=True)
    else:
        tiny = bool(options.get("tiny"))
        dtype = torch_dtype(spec, "float32")
        seed = int(options.get("seed", 0))
        layers = int(options.get("num_layers", 2 if tiny else 28))
        with build_on(device, dtype, seed):
            transformer = DiTTransformer2DModel(**dit_xl2_config(resolution // 8, layers, tiny))
        with build_on(device, dtype, seed + 1):
            vae = sd_vae(resolution, 0.18215, tiny)
        transformer, vae = _finish(transformer, device, dtype), _finish(vae, device, dtype)
        scheduler = DDIMScheduler(**DIT_SCHEDULER)
    return ClassConditionalPipeline(transformer, scheduler, vae=vae, label_fn=parse_imagenet_class, **common)


def dit_parameter_count(transformer: DiTTransformer2DModel, dedup: bool = True) -> int:
    """Parameters of a diffusers DiT, counting the conditioning embedder once.

    diffusers' ``DiTTransformer2DModel`` gives every block its own ``AdaLayerNormZero``
    with its own ``CombinedTimestepLabelEmbeddings`` (timestep MLP + label table), where
    the original DiT has one embedder shared by all blocks; the final layer uses block
    0's copy. So the diffusers model holds 27 redundant copies (~2.8M parameters each
    at XL size): ~750M parameters in total vs the published 675M. With ``dedup=True``
    the copies in blocks 1..N-1 are left out, which reproduces the published count.
    """
    total = sum(p.numel() for p in transformer.parameters())
    if not dedup:
        return total
    for block in list(transformer.transformer_blocks)[1:]:
        emb = getattr(getattr(block, "norm1", None), "emb", None)
        if emb is not None:
            total -= sum(p.numel() for p in emb.parameters())
    return total


# ---------------------------------------------------------------------- PixArt-Sigma

def pixart_sigma_config(sample_size: int = 128, num_layers: int = 28, caption_channels: int = 4096,
                        tiny: bool = False, interpolation_scale: float = 2) -> dict:
    heads, head_dim = (2, 16) if tiny else (16, 72)
    return dict(
        num_attention_heads=heads, attention_head_dim=head_dim, in_channels=4, out_channels=8,
        num_layers=num_layers, cross_attention_dim=heads * head_dim, attention_bias=True,
        sample_size=sample_size, patch_size=2, activation_fn="gelu-approximate", num_embeds_ada_norm=1000,
        norm_type="ada_norm_single", norm_elementwise_affine=False, norm_eps=1e-6,
        caption_channels=caption_channels, interpolation_scale=interpolation_scale,
        use_additional_conditions=False,
    )


def t5_config(size: str):
    from transformers import T5Config

    if size not in T5_SIZES:
        raise ValueError(f"options.text_encoder={size!r}; valid: {', '.join(T5_SIZES)}")
    return T5Config(
        vocab_size=32128, d_kv=64 if size != "t5-tiny" else 16, feed_forward_proj="gated-gelu",
        is_encoder_decoder=False, use_cache=False, tie_word_embeddings=False, **T5_SIZES[size],
    )


def build_pixart_sigma(spec: dict) -> TextToImagePipeline:
    options, device, resolution, common = _common(spec, 1024, 20, 4.5)
    on_cuda = str(device).startswith("cuda")
    default_dtype = "bfloat16" if on_cuda else "float32"
    if spec.get("weights"):
        tokenizer, text_encoder, transformer, vae, scheduler = load_text_to_image_folder(spec, default_dtype)
    else:
        from transformers import T5EncoderModel

        tiny = bool(options.get("tiny"))
        dtype = torch_dtype(spec, default_dtype)
        seed = int(options.get("seed", 0))
        layers = int(options.get("num_layers", 2 if tiny else 28))
        size = options.get("text_encoder") or ("t5-tiny" if tiny else "t5-xxl")
        t5 = t5_config(size)
        interp = PIXART_INTERPOLATION.get(resolution, resolution / 512)
        with build_on(device, dtype, seed):
            transformer = PixArtTransformer2DModel(
                **pixart_sigma_config(resolution // 8, layers, t5.d_model, tiny, interp))
        with build_on(device, torch.float32, seed + 1):
            vae = sd_vae(resolution, 0.13025, tiny, force_upcast=True)
        with build_on(device, dtype, seed + 2):
            text_encoder = T5EncoderModel(t5)
        transformer = _finish(transformer, device, dtype)
        vae = _finish(vae, device, torch.float32)
        text_encoder = _finish(text_encoder, device, dtype)
        tokenizer = HashTokenizer(t5.vocab_size, int(options.get("max_sequence_length", 300)))
        scheduler = DPMSolverMultistepScheduler()
    return TextToImagePipeline(tokenizer, text_encoder, transformer, vae, scheduler, **common)
