"""Save a PixArt-Sigma pipeline folder with random weights (what `pipeline.save_pretrained(PATH)` writes), its
tokenizer built offline, for the README's bring-your-own-model flow (lab/device/pixart_24gb.sh).

    python3 lab/device/pixart_folder.py OUT_DIR [--tiny] [--device cuda]

Full size (default): the PixArt-Sigma-XL-2-1024 transformer (28 blocks, width 1152, 0.6 B parameters), a
T5-XXL-sized encoder (24 layers, width 4096, 4.7 B parameters), an SDXL-sized VAE, all in bf16 (VAE fp32),
built on `--device` so that random initialisation is quick. The tokenizer is a word-level fast tokenizer
made here (`tokenizers`; nothing is downloaded), padded to 300 tokens as PixArt-Sigma's. `--tiny` saves the
tests' tiny pipeline instead (tests/helpers/tiny_pipelines.py), to check the flow on a CPU."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "helpers"))
from tiny_pipelines import save_tiny, word_tokenizer  # noqa: E402


def full_size(device: str):
    from diffusers import AutoencoderKL, DPMSolverMultistepScheduler, PixArtSigmaPipeline, PixArtTransformer2DModel
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    with torch.device(device):
        transformer = PixArtTransformer2DModel(
            sample_size=128, num_layers=28, attention_head_dim=72, num_attention_heads=16, in_channels=4,
            out_channels=8, cross_attention_dim=1152, caption_channels=4096, patch_size=2,
            norm_type="ada_norm_single", use_additional_conditions=False, interpolation_scale=2.0).to(torch.bfloat16)
        t5 = T5EncoderModel(T5Config(vocab_size=32128, d_model=4096, d_ff=10240, num_layers=24, num_heads=64,
                                     d_kv=64, feed_forward_proj="gated-gelu", is_encoder_decoder=False,
                                     use_cache=False, pad_token_id=0, eos_token_id=1)).to(torch.bfloat16)
        vae = AutoencoderKL(down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
                            block_out_channels=[128, 256, 512, 512], layers_per_block=2, latent_channels=4,
                            sample_size=1024, scaling_factor=0.13025, force_upcast=True)
    return PixArtSigmaPipeline(tokenizer=word_tokenizer(300), text_encoder=t5, transformer=transformer, vae=vae,
                               scheduler=DPMSolverMultistepScheduler())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    t0 = time.time()
    if args.tiny:
        save_tiny("PixArtSigmaPipeline", args.out)
    else:
        full_size(args.device).save_pretrained(args.out)
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file()) / 2**30
    print(f"saved {'tiny' if args.tiny else 'full-size'} PixArt-Sigma to {args.out}: {size:.2f} GB in "
          f"{time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
