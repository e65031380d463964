"""Diffusers-style inference pipelines behind ``model_under_test.build_pipeline``.

Two pipelines cover the three presets:

* ``ClassConditionalPipeline`` -- DiT (Peebles & Xie): a ``DiTTransformer2DModel``
  conditioned on a class id, classifier-free guidance against the null class, and
  either an ``AutoencoderKL`` decoder (DiT-XL/2) or a pixel-space decoder (the
  embedded digits model). Follows ``diffusers.DiTPipeline``.
* ``TextToImagePipeline`` -- PixArt-Sigma: a T5 encoder, a
  ``PixArtTransformer2DModel`` with cross-attention, and an ``AutoencoderKL``.
  Follows ``diffusers.PixArtSigmaPipeline``.

Determinism: the initial noise of every request is drawn on the CPU from its own
``torch.Generator`` seeded with the request's seed, so a (prompt, seed) pair starts
from the same bits whatever batch it is in and whatever the device. Stages run under
``torch.profiler.record_function`` named ``text_encode``, ``denoise`` and ``decode``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch.profiler import record_function

Request = tuple[str, int]


@dataclass
class GenerationResult:
    images: torch.Tensor  # float32 [N, 3, H, W] in [0, 1]
    latents: torch.Tensor  # final latents before decoding [N, C, h, w]


def initial_noise(seeds: Sequence[int], shape: Sequence[int], device, dtype=torch.float32) -> torch.Tensor:
    """Per-request Gaussian noise: one CPU generator per seed, stacked, then moved."""
    samples = []
    for seed in seeds:
        gen = torch.Generator(device="cpu").manual_seed(int(seed))
        samples.append(torch.randn(tuple(shape), generator=gen, dtype=torch.float32))
    return torch.stack(samples).to(device=device, dtype=dtype)


def _check_requests(requests) -> tuple[list[str], list[int]]:
    requests = list(requests)
    if not requests:
        raise ValueError("generate() needs at least one (prompt, seed) request")
    prompts, seeds = [], []
    for item in requests:
        prompt, seed = item
        prompts.append(str(prompt))
        seeds.append(int(seed))
    return prompts, seeds


class _PipelineBase:
    def __init__(self, *, device, resolution: int, steps: int, guidance: float, spec: dict | None = None):
        self.device = torch.device(device)
        self.resolution = int(resolution)
        self.steps = int(steps)
        self.guidance = float(guidance)
        self.spec = dict(spec or {})

    @property
    def components(self) -> dict[str, torch.nn.Module]:
        return {name: mod for name, mod in self._modules().items() if isinstance(mod, torch.nn.Module)}

    def _modules(self) -> dict:  # pragma: no cover - overridden
        raise NotImplementedError

    def _timestep_batch(self, t: torch.Tensor, n: int) -> torch.Tensor:
        if not torch.is_tensor(t):
            t = torch.tensor([t])
        if t.ndim == 0:
            t = t[None]
        return t.to(self.device).expand(n)

    def _vae_decode(self, vae, latents: torch.Tensor) -> torch.Tensor:
        images = vae.decode(latents.to(vae.dtype) / vae.config.scaling_factor).sample
        return (images.float() / 2 + 0.5).clamp(0, 1)


class ClassConditionalPipeline(_PipelineBase):
    """DiT sampling: class label in, image out.

    ``label_fn`` maps a prompt to a class id (``None`` = unconditional). ``vae=None``
    selects the pixel-space decoder: latents in [-1, 1] are mapped to [0, 1] and
    resized to ``resolution`` by bilinear interpolation, as three identical channels.
    """

    def __init__(
        self,
        transformer,
        scheduler,
        *,
        label_fn: Callable[[str], int | None],
        vae=None,
        device="cpu",
        resolution: int,
        steps: int,
        guidance: float,
        spec: dict | None = None,
    ):
        super().__init__(device=device, resolution=resolution, steps=steps, guidance=guidance, spec=spec)
        self.transformer = transformer
        self.scheduler = scheduler
        self.vae = vae
        self.label_fn = label_fn
        cfg = transformer.config
        self.null_class = int(cfg.num_embeds_ada_norm)
        self.latent_channels = int(cfg.in_channels)
        if vae is None:
            self.latent_size = int(cfg.sample_size)
        else:
            factor = 2 ** (len(vae.config.block_out_channels) - 1)
            self.latent_size = self.resolution // factor
            if self.latent_size != int(cfg.sample_size):
                raise ValueError(
                    f"resolution {self.resolution} gives {self.latent_size}x{self.latent_size} latents, "
                    f"but the transformer was built for {cfg.sample_size}x{cfg.sample_size}"
                )

    def _modules(self) -> dict:
        return {"transformer": self.transformer, "vae": self.vae}

    def encode_labels(self, prompts: list[str]) -> torch.Tensor:
        ids = [self.label_fn(p) for p in prompts]
        ids = [self.null_class if i is None else int(i) for i in ids]
        return torch.tensor(ids, dtype=torch.long, device=self.device)

    def predict_noise(self, latents: torch.Tensor, t: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        dtype = self.transformer.dtype
        out = self.transformer(
            latents.to(dtype), timestep=self._timestep_batch(t, latents.shape[0]), class_labels=labels
        ).sample
        # DiT-XL/2 also predicts a variance ("learned sigma"); sampling uses the noise half.
        return out[:, : self.latent_channels].float()

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        if self.vae is not None:
            return self._vae_decode(self.vae, latents)
        images = ((latents.float() + 1) / 2).clamp(0, 1)
        if images.shape[-1] != self.resolution or images.shape[-2] != self.resolution:
            size = (self.resolution, self.resolution)
            images = F.interpolate(images, size=size, mode="bilinear", align_corners=False)
        if images.shape[1] == 1:
            images = images.repeat(1, 3, 1, 1)
        return images

    @torch.inference_mode()
    def generate(self, requests: Sequence[Request]) -> GenerationResult:
        prompts, seeds = _check_requests(requests)
        with record_function("text_encode"):
            labels = self.encode_labels(prompts)
            null = torch.full_like(labels, self.null_class)
        with record_function("denoise"):
            shape = (self.latent_channels, self.latent_size, self.latent_size)
            latents = initial_noise(seeds, shape, self.device) * self.scheduler.init_noise_sigma
            self.scheduler.set_timesteps(self.steps, device=self.device)
            for t in self.scheduler.timesteps:
                model_input = self.scheduler.scale_model_input(latents, t)
                if self.guidance > 1.0:
                    # classifier-free guidance: a conditional and an unconditional pass
                    eps_cond = self.predict_noise(model_input, t, labels)
                    eps_uncond = self.predict_noise(model_input, t, null)
                    eps = eps_uncond + self.guidance * (eps_cond - eps_uncond)
                else:
                    eps = self.predict_noise(model_input, t, labels)
                latents = self.scheduler.step(eps, t, latents).prev_sample
        with record_function("decode"):
            images = self.decode(latents)
        return GenerationResult(images=images.float(), latents=latents)


class TextToImagePipeline(_PipelineBase):
    """PixArt-Sigma sampling: T5 prompt embeddings, cross-attention DiT, VAE decode."""

    def __init__(
        self,
        tokenizer,
        text_encoder,
        transformer,
        vae,
        scheduler,
        *,
        device="cuda",
        resolution: int,
        steps: int,
        guidance: float,
        negative_prompt: str = "",
        spec: dict | None = None,
    ):
        super().__init__(device=device, resolution=resolution, steps=steps, guidance=guidance, spec=spec)
        self.tokenizer = tokenizer
        self.text_encoder = text_encoder
        self.transformer = transformer
        self.vae = vae
        self.scheduler = scheduler
        self.negative_prompt = negative_prompt
        self.latent_channels = int(transformer.config.in_channels)
        factor = 2 ** (len(vae.config.block_out_channels) - 1)
        self.latent_size = self.resolution // factor

    def _modules(self) -> dict:
        return {"transformer": self.transformer, "vae": self.vae, "text_encoder": self.text_encoder}

    def encode_prompt(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = self.tokenizer(prompts)
        ids = tokens["input_ids"].to(self.device)
        mask = tokens["attention_mask"].to(self.device)
        embeds = self.text_encoder(ids, attention_mask=mask)[0]
        return embeds.to(self.transformer.dtype), mask

    @torch.inference_mode()
    def generate(self, requests: Sequence[Request]) -> GenerationResult:
        prompts, seeds = _check_requests(requests)
        cfg = self.guidance > 1.0
        with record_function("text_encode"):
            embeds, mask = self.encode_prompt(prompts)
            if cfg:
                neg_embeds, neg_mask = self.encode_prompt([self.negative_prompt] * len(prompts))
                embeds = torch.cat([neg_embeds, embeds])
                mask = torch.cat([neg_mask, mask])
        with record_function("denoise"):
            shape = (self.latent_channels, self.latent_size, self.latent_size)
            latents = initial_noise(seeds, shape, self.device) * self.scheduler.init_noise_sigma
            self.scheduler.set_timesteps(self.steps, device=self.device)
            dtype = self.transformer.dtype
            for t in self.scheduler.timesteps:
                model_input = torch.cat([latents] * 2) if cfg else latents
                model_input = self.scheduler.scale_model_input(model_input, t)
                out = self.transformer(
                    model_input.to(dtype),
                    encoder_hidden_states=embeds,
                    encoder_attention_mask=mask,
                    timestep=self._timestep_batch(t, model_input.shape[0]),
                    added_cond_kwargs={"resolution": None, "aspect_ratio": None},
                ).sample.float()
                if cfg:  # one batched pass, as in diffusers' PixArtSigmaPipeline
                    uncond, cond = out.chunk(2)
                    out = uncond + self.guidance * (cond - uncond)
                eps = out[:, : self.latent_channels]  # learned-sigma half dropped
                latents = self.scheduler.step(eps, t, latents).prev_sample
        with record_function("decode"):
            images = self._vae_decode(self.vae, latents)
        return GenerationResult(images=images.float(), latents=latents)
