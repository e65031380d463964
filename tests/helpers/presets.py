"""The GPU presets' specs as the harness hands them over (`Lane.workload`), and the published sizes the preset
tests hold them to (the unit tier on the meta device and CPU, the end-to-end tier on CUDA).


Published parameter counts these tests hold the presets to (within 2 %):
* DiT-XL/2: 675M -- Peebles & Xie, "Scalable Diffusion Models with Transformers"
  (arXiv:2212.09748), Table 4 (DiT-XL/2: 675M parameters, 118.6 Gflops).
  diffusers' DiTTransformer2DModel repeats the timestep/label embedder in every block
  (~750M raw); ``dit_parameter_count`` counts it once.
* PixArt-Sigma: 0.6B -- Chen et al., "PixArt-Sigma: Weak-to-Strong Training of Diffusion
  Transformer for 4K Text-to-Image Generation" (arXiv:2403.04692), abstract ("0.6B
  parameters"); the transformer alone, without the T5 text encoder and the VAE.
"""

from __future__ import annotations

import torch

from dit_ar_contract.config import load_config

from .loop import PROJECT

ROOT = PROJECT  # the mutable package is imported from here (the test modules put it on sys.path)

LANES = load_config(ROOT / "config" / "autoresearch.json").lanes
DIT_SPEC = LANES["dit-xl2-256"].workload(ROOT)
PIXART_SPEC = LANES["pixart-sigma-1024"].workload(ROOT)


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def within(value: float, published: float, tol: float = 0.02) -> bool:
    return abs(value - published) / published <= tol


def reduced_forward(model_under_test: object, spec: dict, prompts: list[str]) -> None:
    """A 2-step 64 px generate of a reduced preset on the CPU: shapes, finite latents, images in [0, 1]."""
    spec = dict(spec, device="cpu", resolution=64, steps=2)
    pipe = model_under_test.build_pipeline(spec)  # type: ignore[attr-defined]
    out = pipe.generate([(p, 100 + i) for i, p in enumerate(prompts)])
    assert out.images.shape == (len(prompts), 3, 64, 64)
    assert out.latents.shape == (len(prompts), 4, 8, 8)
    assert torch.isfinite(out.latents).all()
    assert float(out.images.min()) >= 0 and float(out.images.max()) <= 1
