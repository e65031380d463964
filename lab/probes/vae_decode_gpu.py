"""The dit-xl2-256 lane's VAE decode on a GPU, four ways: where its time goes, and what the ladder's decode step buys.

The lane's VAE (SD layout, seeded random weights, as `model_under_test.presets` builds it) decodes the final
latents of the shipped pipeline (fp32 eager, 8 steps, the batch of the lane) as:

* `fp32`            the shipped decode (TF32 convolutions where torch allows them);
* `bf16`            cast to bfloat16, NCHW;
* `bf16-cl`         cast to bfloat16, channels-last weights (the earlier ladder step): torch's CUDA GroupNorm
                    works on NCHW only, so every norm converts its input back and every conv converts again;
* `bf16-compiled`   cast to bfloat16, `vae.decoder.compile()` (examples/gpu-ladder patch 06): the GroupNorm
                    statistics as split reductions over the whole GPU (torch's eager kernel gives each of the
                    batch x 32 groups one thread block, 64 blocks on a 132-SM GPU, a loop of dependent loads
                    whatever the dtype), fused with the SiLUs, adds and casts around them.

For each: the decode's median wall time eager (host launches included, synchronised), the median replay time
of the same decode captured as a CUDA graph (device time only: what the sampling graph pays), the compile time,
and PSNR / SSIM of its images against the fp32 decode, measured as the numerical gate measures them
(`quality_suite.metrics.fidelity_batch`; the gate asks for 30 dB and SSIM 0.97 in every case). With --profile,
the top kernels of one eager decode of each variant (torch.profiler).

    python -m lab.probes.vae_decode_gpu [--batch 2] [--rounds 20] [--profile]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch

import model_under_test
from model_under_test.presets import _finish, build_on, sd_vae
from perf_suite.profiling import top_ops
from quality_suite.metrics import fidelity_batch

PROMPTS = ("golden retriever", "tabby", "goldfish", "volcano")


def final_latents(batch: int) -> torch.Tensor:
    """The shipped pipeline's final latents for `batch` requests (fp32 eager, the lane at 8 steps)."""
    spec = {"lane": "dit-xl2-256", "preset": "dit-xl-2-256", "weights": None, "device": "cuda", "resolution": 256,
            "steps": 8, "guidance": 4.0, "batch": batch, "options": {}}
    pipe = model_under_test.build_pipeline(spec)
    requests = [(PROMPTS[i % len(PROMPTS)], 1000 + i) for i in range(batch)]
    with torch.inference_mode():
        latents = pipe.generate(requests).latents
    del pipe
    torch.cuda.empty_cache()
    return latents


def variants(vae: torch.nn.Module) -> dict[str, torch.nn.Module]:
    half = copy.deepcopy(vae).to(torch.bfloat16)
    compiled = copy.deepcopy(vae).to(torch.bfloat16)
    compiled.decoder.compile()
    return {"fp32": vae, "bf16": half, "bf16-cl": copy.deepcopy(half).to(memory_format=torch.channels_last),
            "bf16-compiled": compiled}


def decoder(vae: torch.nn.Module, latents: torch.Tensor) -> Callable[[], torch.Tensor]:
    """The pipeline's decode (ClassConditionalPipeline._vae_decode) on fixed latents."""
    def decode() -> torch.Tensor:
        images = vae.decode(latents.to(vae.dtype) / vae.config.scaling_factor).sample
        return (images.float() / 2 + 0.5).clamp(0, 1)
    return decode


def median_ms(call: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def graphed(decode: Callable[[], torch.Tensor]) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        decode()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = decode()
    return graph, out


def measure(name: str, vae: torch.nn.Module, latents: torch.Tensor, ref: torch.Tensor | None, rounds: int,
            profile: bool) -> torch.Tensor:
    decode = decoder(vae, latents)
    start = time.perf_counter()
    images = decode()  # the compiled variant compiles here
    torch.cuda.synchronize()
    first_s = time.perf_counter() - start
    eager = median_ms(decode, rounds)
    graph, _ = graphed(decode)
    replay = median_ms(graph.replay, rounds)
    line = f"{name:>14}: eager {eager:6.2f} ms, graph replay {replay:6.2f} ms, first call {first_s:5.1f} s"
    if ref is not None:
        same = [torch.zeros(1)] * len(ref)  # the latents are not the question here
        fid = fidelity_batch(list(images.cpu()), list(ref.cpu()), same, same)
        line += (f"; against fp32: PSNR {min(f['psnr_db'] for f in fid):.2f} dB worst, "
                 f"SSIM {min(f['ssim'] for f in fid):.5f} worst")
    print(line, flush=True)
    if profile:
        from torch.profiler import ProfilerActivity
        with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            decode()
            torch.cuda.synchronize()
        for op in top_ops(prof.key_averages(), True, n=8):
            print(f"{'':>16}{op['self_ms']:7.2f} ms {op['calls']:>4}x  {op['name'][:100]}")
    return images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    latents = final_latents(args.batch)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}: the lane's final latents, batch "
          f"{args.batch}, std {latents.std().item():.1f}", flush=True)
    with build_on("cuda", torch.float32, 1):  # the preset's VAE seed (seed + 1 with the default seed 0)
        vae = _finish(sd_vae(256, 0.18215), "cuda", torch.float32)
    ref = None
    with torch.inference_mode():
        for name, model in variants(vae).items():
            images = measure(name, model, latents, ref, args.rounds, args.profile)
            ref = images if ref is None else ref


if __name__ == "__main__":
    main()
