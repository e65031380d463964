"""The whole sampling loop and the decode as two CUDA graphs captured by hand over static buffers.

A lane's shapes, steps and guidance are fixed (DESIGN §2), so every generate of a batch size runs the same
sequence of kernels; only the initial noise (from the requests' seeds) and the class labels change.
`SamplingGraph` captures that sequence once per batch size and replays it:

* host work stays where the eager pipeline does it, out of the replay: each prompt's class label and each
  request's noise (drawn on the CPU from its seed) are made on the host and copied into static buffers;
* the `denoise` graph holds every denoiser pass (both guidance passes as one batched forward), the guidance
  combine and the scheduler's own `step` (diffusers' code, called with each timestep as a Python int: its
  coefficients are host scalars, baked into the graph at capture, and nothing in it waits for the device);
* each step's timestep batch for the denoiser is made inside the capture (`torch.full`), so the graph reads
  nothing it does not own but the two static input buffers, which `Captured` keeps. A CUDA graph holds
  addresses, not references: a tensor made before the capture and then dropped is freed, its memory reused
  by the next allocation, and every later replay reads whatever was written there;
* the `decode` graph reads the denoise graph's final latents and holds the VAE decode;
* warm-up on a side stream before capture (compiled blocks compile there, cuBLAS and the allocator settle),
  capture on the first generate of a batch size (the harness's warm-up rounds run until the round time is
  steady, so it is never timed), then replay and a clone of the outputs (the next replay overwrites them).

The replay launches the kernels the eager loop launches, in the same order, on the same inputs: the outputs
are the eager pipeline's. The stage ranges (`text_encode`, `denoise`, `decode`) stay where the eager
pipeline has them, around the host work and the replays.

Only schedulers whose `step` runs without host synchronisation on host timesteps are captured (DDIM); with
another scheduler the pipeline stays eager. On the CPU `RecordedGraphs` stands in when options.cuda_graphs_on_cpu
is set, for the tests: it has a CUDA graph's semantics (see its docstring), so what would go wrong on the GPU
goes wrong on the CPU too.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.profiler import record_function
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

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


@dataclass(frozen=True)
class _Made:
    slot: int  # a tensor the capture made


@dataclass(frozen=True)
class _Read:
    index: int  # a tensor the capture read from outside


class _Recorder(TorchDispatchMode):
    """Records the ATen operations of one call: each operation, its arguments, which tensors it made."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[Any, Any, list[int | None]]] = []
        self.made: dict[int, int] = {}  # id(tensor) -> slot
        self.alive: list[torch.Tensor] = []  # every tensor seen, held while recording (ids stay unique)
        self.read: dict[int, int] = {}  # id(tensor) -> index in `inputs`
        self.inputs: list[torch.Tensor] = []

    def _mark(self, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if id(value) in self.made:
            return _Made(self.made[id(value)])
        if id(value) not in self.read:
            self.read[id(value)] = len(self.inputs)
            self.inputs.append(value)
        return _Read(self.read[id(value)])

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.namespace == "profiler":  # record_function's markers: nothing to replay
            return out
        spec = tree_map(self._mark, (args, kwargs))
        slots: list[int | None] = []
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor) and id(leaf) not in self.read:
                slot = self.made.setdefault(id(leaf), len(self.made))
                self.alive.append(leaf)
                slots.append(slot)
            else:
                slots.append(None)
        self.ops.append((func, spec, slots))
        return out


class _Recorded:
    """One recorded call, replayed operation by operation (see RecordedGraphs)."""

    def __init__(self, recorder: _Recorder, out: torch.Tensor):
        self.ops, self.out, self.replays = recorder.ops, out, 0
        self.out_slot = recorder.made[id(out)]
        self.inputs = [weakref.ref(t) for t in recorder.inputs]
        self.shapes = [(tuple(t.shape), t.dtype) for t in recorder.inputs]

    def replay(self) -> None:
        inputs = [ref() for ref in self.inputs]
        freed = [self.shapes[i] for i, t in enumerate(inputs) if t is None]
        if freed:
            raise RuntimeError(f"the graph reads {len(freed)} tensor(s) that were freed after the capture (shape, "
                               f"dtype: {freed[:3]}): a CUDA graph would read whatever reused that memory; keep every "
                               "tensor the captured function reads from outside alive as long as the graph")
        made: dict[int, torch.Tensor] = {}

        def value(v: Any) -> Any:
            if isinstance(v, _Made):
                return made[v.slot]
            return inputs[v.index] if isinstance(v, _Read) else v

        for func, spec, slots in self.ops:
            args, kwargs = tree_map(value, spec)
            for slot, leaf in zip(slots, tree_leaves(func(*args, **kwargs))):
                if slot is not None:
                    made[slot] = leaf
        self.out.copy_(made[self.out_slot])  # the static output is overwritten, as a CUDA graph's is
        self.replays += 1


class RecordedGraphs:
    """A CPU stand-in with a CUDA graph's semantics, for tests (options.cuda_graphs_on_cpu).

    The capture runs the function once and records the ATen operations it ran; a replay runs those operations
    again and nothing else. So Python code, control flow and host-side state (a scheduler's counters, a Python
    float, a timestep) are frozen at capture, as in a CUDA graph. Tensors the capture read but did not make
    (static inputs, weights) are held by weak reference, as a graph holds their addresses: a replay refuses
    when one of them was freed, where a CUDA graph would silently read whatever reused that memory. The
    captured function is not kept. The output is the capture's own tensor, overwritten by every replay.
    """

    def capture(self, fn: Callable[[], torch.Tensor], warmup: int) -> tuple[_Recorded, torch.Tensor]:
        for _ in range(warmup):
            fn()
        recorder = _Recorder()
        with recorder:
            out = fn()
        return _Recorded(recorder, out), out


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
        return cls(pipe, RecordedGraphs()) if (pipe.spec.get("options") or {}).get("cuda_graphs_on_cpu") else None

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
        pipe.scheduler.set_timesteps(pipe.steps)  # on the host: the loop below reads them as Python ints
        timesteps = [int(t) for t in pipe.scheduler.timesteps]
        dtype = pipe.scheduler.timesteps.dtype

        def denoise() -> torch.Tensor:
            return self._sample(static_noise, static_labels, timesteps, dtype)

        denoise_graph, latents = self.backend.capture(denoise, self.warmup)
        denoise_graph.replay()  # real latents for the decode's warm-up

        def decode() -> torch.Tensor:
            return pipe.decode(latents)

        decode_graph, images = self.backend.capture(decode, self.warmup)
        run = self.captured[len(labels)] = Captured(static_noise, static_labels, denoise_graph, latents,
                                                    decode_graph, images)
        return run

    def _sample(self, noise: torch.Tensor, labels: torch.Tensor, timesteps: list[int],
                dtype: torch.dtype) -> torch.Tensor:
        """The eager loop of ClassConditionalPipeline.generate with batched guidance, nothing host-bound in it."""
        pipe = self.pipe
        latents = noise * pipe.scheduler.init_noise_sigma
        guided = pipe.guidance > 1.0
        both = torch.cat([labels, torch.full_like(labels, pipe.null_class)]) if guided else labels
        for t in timesteps:
            # the denoiser's timestep batch, made inside the capture (the eager loop's t.expand(n), materialised)
            t_rows = torch.full((len(both),), t, dtype=dtype, device=pipe.device)
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
