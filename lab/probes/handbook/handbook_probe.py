"""Measurements behind a few handbook pages (issue 16): VAE decode at 1024², fp8 weight storage, torch._int_mm.

Run from the repository root on a CUDA machine with diffusers installed:

    python lab/probes/handbook/handbook_probe.py  # prints JSON; writes $OUT/probe.json if OUT is set

What it measures, all with seeded random weights of the presets' architectures (model_under_test/presets.py):

* the SDXL-layout VAE decoding one 1024x1024 image in fp32: extra peak memory over the weights, median time,
  the attention kernel its mid-block gets, and the same with cudnn.benchmark, channels_last, 512-pixel tiles
  and bf16 (PSNR of each against the fp32 decode);
* the SD-layout VAE decoding two 256x256 images in fp32;
* the DiT-XL/2 transformer (batch 4, one forward): weight memory and time in fp32, bf16, and bf16 compute with
  float8_e4m3fn storage (diffusers layerwise casting), with the relative L2 error of each against fp32;
* torch._int_mm against a bf16 matmul at a DiT QKV shape, and its refusal of 4 rows.

Times are eager, one process, median of a few repeats: indicative for the device they ran on, never a verdict.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from functools import partial
from typing import Any, Callable

import torch

sys.path.insert(0, os.getcwd())

from diffusers import DiTTransformer2DModel  # noqa: E402

from model_under_test.presets import dit_xl2_config, sd_vae  # noqa: E402

DEV = "cuda"


def median_ms(fn: Callable[[], Any], reps: int = 5, warm: int = 2) -> float:
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def with_peak(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """Result, extra peak allocated MiB over what was allocated before, peak reserved MiB."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    result = fn()
    torch.cuda.synchronize()
    return result, (torch.cuda.max_memory_allocated() - base) / 2**20, torch.cuda.max_memory_reserved() / 2**20


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a.float() - b.float()) ** 2).mean())
    return 99.0 if mse == 0 else 10 * math.log10(1.0 / mse)


def decode(vae: Any, z: torch.Tensor) -> torch.Tensor:
    return (vae.decode(z).sample.clamp(-1, 1) + 1) / 2


def vae_section(out: dict[str, Any]) -> None:
    from torch.profiler import ProfilerActivity, profile

    vae = sd_vae(1024, 0.13025, force_upcast=True).to(DEV).eval()
    out["vae_params_m"] = sum(p.numel() for p in vae.parameters()) / 1e6
    z = torch.randn(1, 4, 128, 128, device=DEV)
    ref, extra, reserved = with_peak(partial(decode, vae, z))
    out["vae1024_fp32"] = {"peak_extra_mb": extra, "reserved_mb": reserved, "ms": median_ms(partial(decode, vae, z))}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        decode(vae, z)
    keys = ("fmha", "flash", "attention", "softmax", "bmm", "cudnn_sdpa")
    out["vae1024_attention_kernels"] = [e.key[:120] for e in prof.key_averages()
                                        if any(k in e.key.lower() for k in keys)][:8]
    torch.backends.cudnn.benchmark = True
    out["vae1024_fp32_cudnn_benchmark_ms"] = median_ms(partial(decode, vae, z))
    torch.backends.cudnn.benchmark = False
    vae = vae.to(memory_format=torch.channels_last)
    zcl = z.contiguous(memory_format=torch.channels_last)
    img, extra, _ = with_peak(partial(decode, vae, zcl))
    out["vae1024_fp32_channels_last"] = {"peak_extra_mb": extra, "ms": median_ms(partial(decode, vae, zcl)),
                                         "psnr_vs_ref": psnr(img, ref)}
    vae = vae.to(memory_format=torch.contiguous_format)
    vae.enable_tiling()
    vae.tile_sample_min_size, vae.tile_latent_min_size = 512, 64
    img, extra, _ = with_peak(partial(decode, vae, z))
    out["vae1024_fp32_tiled512"] = {"peak_extra_mb": extra, "ms": median_ms(partial(decode, vae, z)),
                                    "psnr_vs_ref": psnr(img, ref)}
    vae.disable_tiling()
    vae = vae.to(torch.bfloat16)
    zb = z.bfloat16()
    img, extra, _ = with_peak(partial(decode, vae, zb))
    out["vae1024_bf16"] = {"peak_extra_mb": extra, "ms": median_ms(partial(decode, vae, zb)),
                           "psnr_vs_ref": psnr(img, ref)}
    del vae
    small = sd_vae(256, 0.18215).to(DEV).eval()
    z2 = torch.randn(2, 4, 32, 32, device=DEV)
    _, extra, _ = with_peak(partial(decode, small, z2))
    out["vae256_b2_fp32"] = {"peak_extra_mb": extra, "ms": median_ms(partial(decode, small, z2))}
    del small
    torch.cuda.empty_cache()


def dit_section(out: dict[str, Any]) -> None:
    torch.manual_seed(0)
    with torch.device(DEV):
        tr = DiTTransformer2DModel(**dit_xl2_config()).eval()
    x = torch.randn(4, 4, 32, 32, device=DEV)
    t = torch.full((4,), 500, device=DEV, dtype=torch.long)
    y = torch.tensor([207, 360, 1000, 1000], device=DEV)

    def fwd(model: Any, xx: torch.Tensor) -> torch.Tensor:
        return model(xx, timestep=t, class_labels=y).sample.float()

    ref = fwd(tr, x)

    def rel(a: torch.Tensor) -> float:
        return float((a - ref).norm() / ref.norm())

    def gib() -> float:
        return torch.cuda.memory_allocated() / 2**30

    out["dit_fp32"] = {"weights_gb": gib(), "ms": median_ms(partial(fwd, tr, x))}
    tr = tr.to(torch.bfloat16)
    torch.cuda.empty_cache()
    xb = x.bfloat16()
    out["dit_bf16"] = {"weights_gb": gib(), "rel_l2": rel(fwd(tr, xb)), "ms": median_ms(partial(fwd, tr, xb))}
    tr.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.bfloat16)
    torch.cuda.empty_cache()
    dtypes: dict[str, int] = {}
    for p in tr.parameters():
        dtypes[str(p.dtype)] = dtypes.get(str(p.dtype), 0) + p.numel()
    out["dit_fp8_storage"] = {"weights_gb": gib(), "param_dtypes": dtypes, "rel_l2": rel(fwd(tr, xb)),
                              "ms": median_ms(partial(fwd, tr, xb))}
    del tr
    torch.cuda.empty_cache()


def int_mm_section(out: dict[str, Any]) -> None:
    a = torch.randint(-127, 127, (1024, 1152), device=DEV, dtype=torch.int8)
    b = torch.randint(-127, 127, (3456, 1152), device=DEV, dtype=torch.int8).t()
    ab, bb = a.bfloat16(), b.bfloat16()
    int_mm = torch._int_mm  # noqa: SLF001 - the int8 GEMM a candidate can reach without torchao
    out["int_mm_1024x1152x3456"] = {"int8_ms": median_ms(partial(int_mm, a, b), 50, 10),
                                    "bf16_ms": median_ms(partial(torch.matmul, ab, bb), 50, 10)}
    try:
        int_mm(a[:4], b)
        out["int_mm_m4"] = "ok"
    except RuntimeError as exc:
        out["int_mm_m4"] = str(exc).splitlines()[0][:160]


def main() -> None:
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    torch.manual_seed(0)
    with torch.inference_mode():
        vae_section(out)
        dit_section(out)
        int_mm_section(out)
    text = json.dumps(out, indent=1)
    print(text)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "probe.json"), "w", encoding="utf-8") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
