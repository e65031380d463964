"""The whole sampling loop and the decode as two CUDA graphs captured by hand over static buffers.

A lane's shapes, steps and guidance are fixed (DESIGN §2), so every generate of a batch size runs the same
sequence of kernels; only the initial noise (from the requests' seeds) and the class labels change.
`SamplingGraph` captures that sequence once per batch size and replays it:

* host work stays where the eager pipeline does it, out of the replay: each prompt's class label and each
  request's noise (drawn on the CPU from its seed) are made on the host and copied into static buffers;
  the timesteps and each step's timestep batch are made before capture;
* the `denoise` graph holds every denoiser pass (both guidance passes as one batched forward), the guidance
  combine and the scheduler's own `step` (diffusers' code, run once during capture on CPU timesteps: its
  coefficients are CPU scalars then, so nothing in it waits for the device);
* the `decode` graph reads the denoise graph's final latents and holds the VAE decode;
* warm-up on a side stream before capture (compiled blocks compile there, cuBLAS and the allocator settle),
  capture on the first generate of a batch size (the harness's warm-up rounds run until the round time is
  steady, so it is never timed), then replay and a clone of the outputs (the next replay overwrites them).

The replay launches the kernels the eager loop launches, in the same order, on the same inputs: the outputs
are the eager pipeline's. The stage ranges (`text_encode`, `denoise`, `decode`) stay where the eager
pipeline has them, around the host work and the replays.

Only schedulers whose `step` runs without host synchronisation on CPU timesteps are captured (DDIM); with
another scheduler the pipeline stays eager. On the CPU `EagerGraphs` stands in (it "replays" by calling
the captured function again on the same buffers) when options.cuda_graphs_on_cpu is set, for the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.profiler import record_function

from .pipeline import GenerationResult, _check_requests, initial_noise

CAPTURABLE_SCHEDULERS = ("DDIMScheduler",)


class CudaGraphs:
    """torch.cuda.CUDAGraph: warm up on a side stream, then capture one call."""

    def capture(self, fn: Callable[[], torch.Tensor], warmup: int) -> tuple[Any, torch.Tensor]:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn()
        return graph, out


class _Replayed:
    def __init__(self, fn: Callable[[], torch.Tensor], out: torch.Tensor):
        self.fn, self.out, self.replays = fn, out, 0

    def replay(self) -> None:
        self.out.copy_(self.fn())  # the static output is overwritten, as a CUDA graph's is
        self.replays += 1


class EagerGraphs:
    """A stand-in for CPU tests: the same buffers and calls, no graph."""

    def capture(self, fn: Callable[[], torch.Tensor], warmup: int) -> tuple[Any, torch.Tensor]:
        for _ in range(warmup):
            fn()
        out = fn().clone()
        return _Replayed(fn, out), out


@dataclass
class Captured:
    """One batch size's graphs and the static buffers they read and write."""

    noise: torch.Tensor  # [B, C, h, w] float32, input
    labels: torch.Tensor  # [B] int64, input
    denoise: Any
    latents: torch.Tensor  # output of `denoise`, input of `decode`
    decode: Any
    images: torch.Tensor  # output of `decode`


class SamplingGraph:
    """A ClassConditionalPipeline's generate as captured graphs (see the module docstring)."""

    def __init__(self, pipe: Any, backend: Any, warmup: int = 2):
        self.pipe, self.backend, self.warmup = pipe, backend, warmup
        self.captured: dict[int, Captured] = {}

    @classmethod
    def for_pipeline(cls, pipe: Any) -> SamplingGraph | None:
        """The pipeline's sampling graph: on CUDA with a capturable scheduler, or the CPU stand-in when asked."""
        if type(pipe.scheduler).__name__ not in CAPTURABLE_SCHEDULERS:
            return None
        if pipe.device.type == "cuda":
            return cls(pipe, CudaGraphs())
        return cls(pipe, EagerGraphs()) if (pipe.spec.get("options") or {}).get("cuda_graphs_on_cpu") else None

    def generate(self, requests: Sequence[tuple[str, int]]) -> GenerationResult:
        pipe = self.pipe
        prompts, seeds = _check_requests(requests)
        with record_function("text_encode"):
            labels = pipe.encode_labels(prompts)
        with record_function("denoise"):
            shape = (pipe.latent_channels, pipe.latent_size, pipe.latent_size)
            noise = initial_noise(seeds, shape, "cpu")  # each request's own CPU generator, as in the eager loop
            run = self.captured.get(len(seeds)) or self._capture(noise, labels)
            run.noise.copy_(noise)
            run.labels.copy_(labels)
            run.denoise.replay()
        with record_function("decode"):
            run.decode.replay()
        return GenerationResult(images=run.images.clone(), latents=run.latents.clone())

    def _capture(self, noise: torch.Tensor, labels: torch.Tensor) -> Captured:
        pipe = self.pipe
        static_noise, static_labels = noise.to(pipe.device, copy=True), labels.clone()
        timesteps, rows = self._timesteps(len(labels))

        def denoise() -> torch.Tensor:
            return self._sample(static_noise, static_labels, timesteps, rows)

        denoise_graph, latents = self.backend.capture(denoise, self.warmup)
        denoise_graph.replay()  # real latents for the decode's warm-up

        def decode() -> torch.Tensor:
            return pipe.decode(latents)

        decode_graph, images = self.backend.capture(decode, self.warmup)
        run = self.captured[len(labels)] = Captured(static_noise, static_labels, denoise_graph, latents,
                                                    decode_graph, images)
        return run

    def _timesteps(self, n: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The scheduler's timesteps on the host, and each one as a device batch for the denoiser's rows."""
        pipe = self.pipe
        pipe.scheduler.set_timesteps(pipe.steps)  # on the CPU: step() then reads its tables without a sync
        rows = 2 * n if pipe.guidance > 1.0 else n
        timesteps = list(pipe.scheduler.timesteps)
        return timesteps, [t.reshape(1).to(pipe.device).expand(rows).contiguous() for t in timesteps]

    def _sample(self, noise: torch.Tensor, labels: torch.Tensor, timesteps: list[torch.Tensor],
                rows: list[torch.Tensor]) -> torch.Tensor:
        """The eager loop of ClassConditionalPipeline.generate with batched guidance, nothing host-bound in it."""
        pipe = self.pipe
        latents = noise * pipe.scheduler.init_noise_sigma
        guided = pipe.guidance > 1.0
        both = torch.cat([labels, torch.full_like(labels, pipe.null_class)]) if guided else labels
        for t, t_rows in zip(timesteps, rows):
            model_input = pipe.scheduler.scale_model_input(latents, t)
            if guided:
                doubled = torch.cat([model_input, model_input])
                eps_cond, eps_uncond = self._eps(doubled, t_rows, both).chunk(2)
                eps = eps_uncond + pipe.guidance * (eps_cond - eps_uncond)
            else:
                eps = self._eps(model_input, t_rows, labels)
            latents = pipe.scheduler.step(eps, t, latents).prev_sample
        return latents

    def _eps(self, latents: torch.Tensor, t_rows: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The denoiser's noise prediction (ClassConditionalPipeline.predict_noise without a graph of its own)."""
        pipe = self.pipe
        out = pipe.transformer(latents.to(pipe.transformer.dtype), timestep=t_rows, class_labels=labels).sample
        return out[:, : pipe.latent_channels].float()
