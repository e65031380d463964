"""Baseline artifacts on disk: per-case PNG + safetensors, and the envelope calibration from them."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from .corpora import Case
from .metrics import FIDELITY_KEYS, fidelity_batch


def save_case(folder: Path, case_id: str, image: torch.Tensor, latent: torch.Tensor) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"image": image.contiguous(), "latent": latent.contiguous()}, str(folder / f"{case_id}.safetensors"))
    to_png(image).save(folder / f"{case_id}.png")


def to_png(image: torch.Tensor) -> Image.Image:
    arr = (image.float().clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
    return Image.fromarray(arr)


def load_cases(folder: Path, cases: list[Case]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    images, latents = {}, {}
    for case in cases:
        path = folder / f"{case.id}.safetensors"
        if not path.is_file():
            raise FileNotFoundError(f"baseline artifact {path} is missing")
        t = load_file(str(path))
        images[case.id], latents[case.id] = t["image"], t["latent"]
    return images, latents


def per_case_fidelity(cand_images: dict[str, torch.Tensor], cand_latents: dict[str, torch.Tensor],
                      base_images: dict[str, torch.Tensor], base_latents: dict[str, torch.Tensor]
                      ) -> dict[str, dict[str, float]]:
    ids = [cid for cid in base_images if cid in cand_images]
    values = fidelity_batch([cand_images[c] for c in ids], [base_images[c] for c in ids],
                            [cand_latents[c] for c in ids], [base_latents[c] for c in ids])
    return dict(zip(ids, values))


def envelope_of(runs: dict[str, dict[str, dict[str, float]]]) -> dict[str, float]:
    """The worst value of each fidelity metric over all perturbation runs and cases."""
    env = {"latent_rel_l2": 0.0, "latent_max_abs": 0.0, "psnr_db": math.inf, "ssim": 1.0}
    for per_case in runs.values():
        for m in per_case.values():
            for key in FIDELITY_KEYS:
                worse = max if key.startswith("latent") else min
                env[key] = worse(env[key], m[key])
    return env
