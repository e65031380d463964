"""Tiny diffusers pipelines with seeded random weights, saved with save_pretrained, for the scaffold's tests.

One builder per family `dit-ar scaffold` supports. Every model is a few layers of width 16-64 at 32x32 pixels,
so a generate takes milliseconds on a CPU; the tokenizers are word-level tokenizers built here (nothing is
downloaded). The pictures are noise: the tests check the plumbing (shapes, ranges, determinism), not the art.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

WORDS = ("a", "the", "of", "in", "on", "with", "and", "at", "red", "blue", "lighthouse", "bowl", "ramen", "night",
         "photograph", "painting", "forest", "city", "cat", "dog", "tree", "sky", "water", "light")
RESOLUTION = 32


def word_tokenizer(max_length: int):
    """A fast word-level tokenizer (pad 0, eos 1, unk 2, bos 3) that the pipelines' encode_prompt accepts."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, "<s>": 3, **{w: i + 4 for i, w in enumerate(WORDS)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                                   bos_token="<s>", model_max_length=max_length)


VOCAB = len(WORDS) + 4


def _seeded(seed: int) -> None:
    torch.manual_seed(seed)


def sd_vae(latent_channels: int = 4, **extra: Any):
    """An AutoencoderKL with 8x down-sampling and 8 channels per block."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
                         block_out_channels=[8, 8, 8, 8], layers_per_block=1, norm_num_groups=4,
                         latent_channels=latent_channels, sample_size=RESOLUTION, **extra)


def t5(d_model: int = 32):
    from transformers import T5Config, T5EncoderModel

    return T5EncoderModel(T5Config(vocab_size=VOCAB, d_model=d_model, d_ff=64, num_heads=2, num_layers=2, d_kv=16,
                                   feed_forward_proj="gated-gelu", is_encoder_decoder=False, use_cache=False,
                                   pad_token_id=0, eos_token_id=1))


def clip(with_projection: bool = False):
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    config = CLIPTextConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_attention_heads=2,
                            num_hidden_layers=2, max_position_embeddings=77, projection_dim=32, pad_token_id=0,
                            bos_token_id=3, eos_token_id=1)
    return CLIPTextModelWithProjection(config) if with_projection else CLIPTextModel(config)


def dit() -> Any:
    from diffusers import DDIMScheduler, DiTPipeline, DiTTransformer2DModel

    _seeded(0)
    transformer = DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8,
                                        num_layers=2, sample_size=RESOLUTION // 8, patch_size=2,
                                        num_embeds_ada_norm=1000, norm_type="ada_norm_zero",
                                        activation_fn="gelu-approximate", norm_elementwise_affine=False)
    scheduler = DDIMScheduler(num_train_timesteps=1000, beta_schedule="linear", clip_sample=False)
    return DiTPipeline(transformer=transformer, vae=sd_vae(), scheduler=scheduler)


def _pixart(pipeline_class: Any, max_length: int) -> Any:
    from diffusers import DPMSolverMultistepScheduler, PixArtTransformer2DModel

    _seeded(0)
    transformer = PixArtTransformer2DModel(sample_size=RESOLUTION // 8, num_layers=2, attention_head_dim=8,
                                           num_attention_heads=2, in_channels=4, out_channels=8,
                                           cross_attention_dim=16, caption_channels=32, patch_size=2,
                                           norm_type="ada_norm_single", use_additional_conditions=False)
    return pipeline_class(tokenizer=word_tokenizer(max_length), text_encoder=t5(), transformer=transformer,
                          vae=sd_vae(), scheduler=DPMSolverMultistepScheduler())


def pixart_alpha() -> Any:
    from diffusers import PixArtAlphaPipeline

    return _pixart(PixArtAlphaPipeline, 120)


def pixart_sigma() -> Any:
    from diffusers import PixArtSigmaPipeline

    return _pixart(PixArtSigmaPipeline, 300)


def sd3() -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline

    _seeded(0)
    transformer = SD3Transformer2DModel(sample_size=RESOLUTION // 8, patch_size=2, in_channels=4, out_channels=4,
                                        num_layers=2, attention_head_dim=8, num_attention_heads=2,
                                        joint_attention_dim=64, caption_projection_dim=16, pooled_projection_dim=64,
                                        pos_embed_max_size=16)
    return StableDiffusion3Pipeline(transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(),
                                    vae=sd_vae(shift_factor=0.0609, scaling_factor=1.5305),
                                    text_encoder=clip(True), tokenizer=word_tokenizer(77),
                                    text_encoder_2=clip(True), tokenizer_2=word_tokenizer(77),
                                    text_encoder_3=t5(64), tokenizer_3=word_tokenizer(256))


def sana() -> Any:
    from diffusers import AutoencoderDC, FlowMatchEulerDiscreteScheduler, SanaPipeline, SanaTransformer2DModel
    from transformers import Gemma2Config, Gemma2Model

    _seeded(0)
    transformer = SanaTransformer2DModel(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=8,
                                         num_layers=2, num_cross_attention_heads=2, cross_attention_head_dim=8,
                                         cross_attention_dim=16, caption_channels=32, sample_size=RESOLUTION // 2,
                                         patch_size=1)
    vae = AutoencoderDC(in_channels=3, latent_channels=4, attention_head_dim=2,
                        encoder_block_types=("ResBlock", "EfficientViTBlock"),
                        decoder_block_types=("ResBlock", "EfficientViTBlock"),
                        encoder_block_out_channels=(8, 8), decoder_block_out_channels=(8, 8),
                        encoder_qkv_multiscales=((), (5,)), decoder_qkv_multiscales=((), (5,)),
                        encoder_layers_per_block=(1, 1), decoder_layers_per_block=(1, 1),
                        downsample_block_type="conv", upsample_block_type="interpolate",
                        decoder_norm_types="rms_norm", decoder_act_fns="silu", scaling_factor=0.41407)
    encoder = Gemma2Model(Gemma2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=2, num_key_value_heads=1, head_dim=16, pad_token_id=0,
                                       eos_token_id=1, bos_token_id=3))
    tokenizer = word_tokenizer(300)
    return SanaPipeline(tokenizer=tokenizer, text_encoder=encoder, vae=vae, transformer=transformer,
                        scheduler=FlowMatchEulerDiscreteScheduler())


def flux() -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    _seeded(0)
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                         attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                         pooled_projection_dim=32, axes_dims_rope=[4, 4, 8])
    return FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=sd_vae(shift_factor=0.1159,
                                                                                 scaling_factor=0.3611),
                        text_encoder=clip(), tokenizer=word_tokenizer(77), text_encoder_2=t5(),
                        tokenizer_2=word_tokenizer(512), transformer=transformer)


BUILDERS: dict[str, Callable[[], Any]] = {
    "DiTPipeline": dit, "PixArtAlphaPipeline": pixart_alpha, "PixArtSigmaPipeline": pixart_sigma,
    "StableDiffusion3Pipeline": sd3, "SanaPipeline": sana, "FluxPipeline": flux,
}


def save_tiny(class_name: str, folder: Path) -> Path:
    """Build the tiny pipeline of `class_name` and save it to `folder` (a diffusers pipeline folder)."""
    BUILDERS[class_name]().save_pretrained(folder)
    return folder
