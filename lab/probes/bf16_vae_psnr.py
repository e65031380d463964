"""How far a bf16 VAE decode moves the dit-xl2-256 lane's images from the fp32 decode (examples/gpu-ladder patch 05).

The lane's VAE (SD layout, seeded random weights, as `model_under_test.presets` builds it) decodes the same
latents in float32 and in bfloat16 (channels-last on CUDA, as the patch does); prints the PSNR of each image
against the fp32 decode, for Gaussian latents of three scales (the lane's final latents are of order one).
The numerical gate asks for 30 dB in every case and 38 dB on average (config/autoresearch.json).

    python -m lab.probes.bf16_vae_psnr [--device cuda] [--batch 2]
"""

from __future__ import annotations

import argparse
import time

import torch

from model_under_test.presets import _finish, build_on, sd_vae
from quality_suite.metrics import fidelity_batch


def decode(vae: torch.nn.Module, latents: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        images = vae.decode(latents.to(vae.dtype) / vae.config.scaling_factor).sample
    return (images.float() / 2 + 0.5).clamp(0, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=2)
    args = parser.parse_args()
    with build_on(args.device, torch.float32, 1):  # the preset's VAE seed (seed + 1 with the default seed 0)
        vae = _finish(sd_vae(256, 0.18215), args.device, torch.float32)
    fmt = torch.channels_last if args.device.startswith("cuda") else torch.contiguous_format
    half = _finish(sd_vae(256, 0.18215), args.device, torch.float32)
    half.load_state_dict(vae.state_dict())
    half = half.to(torch.bfloat16, memory_format=fmt)
    gen = torch.Generator().manual_seed(0)
    for scale in (0.5, 1.0, 2.0):
        latents = (torch.randn(args.batch, 4, 32, 32, generator=gen) * scale).to(args.device)
        start = time.perf_counter()
        ref, got = decode(vae, latents).cpu(), decode(half, latents).cpu()
        same = [torch.zeros(1)] * len(ref)  # the latents are not the probe's question
        fid = fidelity_batch(list(got), list(ref), same, same)
        psnr = ", ".join(f"{f['psnr_db']:.2f}" for f in fid)
        ssim = ", ".join(f"{f['ssim']:.5f}" for f in fid)
        print(f"latent scale {scale}: bf16 decode against fp32: PSNR {psnr} dB, SSIM {ssim}; "
              f"image std {ref.std().item():.3f}; {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
