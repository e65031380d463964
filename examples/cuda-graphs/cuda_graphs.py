"""Hand-made CUDA graphs over the lane's fixed shapes (no torch.compile): the DiT forward captured once per
input signature and replayed.

A lane's shapes are fixed (resolution, batch, guidance: DESIGN §2), so every denoiser call of a generate has
the same input shapes, dtypes and devices. `StaticGraph` keeps one captured graph per such signature:

* static input buffers: the first call of a signature clones its inputs into buffers the graph reads;
  every later call copies its inputs INTO those buffers (`copy_`), never rebinds them;
* warm-up before capture on a side stream (cuBLAS handles, autotuned algorithms and the allocator must settle
  before capture, as torch.cuda.graphs documents), then capture of one call into the graph's private pool;
* replay, then a clone of the static output: the next replay overwrites it, and the caller (guidance, the
  scheduler) keeps tensors across calls.

The request batch is part of the signature: a lane always sends full batches (the harness pads the corpus),
so one graph serves a lane; a different batch captures another graph. Nothing that syncs with the host may
run inside the captured function (`.item()`, a shape-dependent Python branch, a CPU tensor made per call).

On the CPU there are no CUDA graphs: `EagerBackend` stands in (it "captures" by remembering the call and
"replays" it on the static buffers), so the same bookkeeping runs and can be tested on any machine. The
pipeline uses it only when options.cuda_graphs_on_cpu is set (tests); otherwise a CPU pipeline runs eager.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

Signature = tuple[tuple[tuple[int, ...], torch.dtype, str], ...]


def signature(tensors: tuple[torch.Tensor, ...]) -> Signature:
    return tuple((tuple(t.shape), t.dtype, str(t.device)) for t in tensors)


class CudaBackend:
    """torch.cuda.CUDAGraph capture and replay."""

    def warm(self, fn: Callable[[], Any], rounds: int) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(rounds):
                fn()
        torch.cuda.current_stream().wait_stream(side)

    def capture(self, fn: Callable[[], torch.Tensor]) -> tuple[Any, torch.Tensor]:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn()
        return graph, out


class _EagerGraph:
    def __init__(self, fn: Callable[[], torch.Tensor], out: torch.Tensor):
        self.fn, self.out, self.replays = fn, out, 0

    def replay(self) -> None:
        self.out.copy_(self.fn())  # the graph's output buffer is overwritten, as a CUDA graph's is
        self.replays += 1


class EagerBackend:
    """A stand-in for CPU tests: the same buffers and calls, no graph."""

    def warm(self, fn: Callable[[], Any], rounds: int) -> None:
        for _ in range(rounds):
            fn()

    def capture(self, fn: Callable[[], torch.Tensor]) -> tuple[Any, torch.Tensor]:
        out = fn().clone()
        return _EagerGraph(fn, out), out


class StaticGraph:
    """`fn(*tensors) -> tensor`, captured once per input signature and replayed on static input buffers."""

    def __init__(self, fn: Callable[..., torch.Tensor], backend: Any = None, warmup: int = 2):
        self.fn, self.warmup = fn, warmup
        self.backend = backend or CudaBackend()
        self.graphs: dict[Signature, tuple[Any, list[torch.Tensor], torch.Tensor]] = {}

    def __call__(self, *tensors: torch.Tensor) -> torch.Tensor:
        key = signature(tensors)
        entry = self.graphs.get(key)
        if entry is None:
            entry = self.graphs[key] = self._capture(tensors)
        graph, static_in, static_out = entry
        for buffer, value in zip(static_in, tensors):
            buffer.copy_(value)
        graph.replay()
        return static_out.clone()

    def _capture(self, tensors: tuple[torch.Tensor, ...]) -> tuple[Any, list[torch.Tensor], torch.Tensor]:
        static_in = [t.clone() for t in tensors]

        def call() -> torch.Tensor:
            return self.fn(*static_in)

        self.backend.warm(call, self.warmup)
        graph, static_out = self.backend.capture(call)
        return graph, static_in, static_out
