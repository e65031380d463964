"""Generate the H200 session's candidate patches, each against the unmodified baseline.

Usage: python make_patches.py CLEAN_CHECKOUT OUT_DIR  (the checkout is reset after each patch).
"""
from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import Callable

if len(sys.argv) != 3:
    sys.exit("usage: python make_patches.py CLEAN_CHECKOUT OUT_DIR")
root, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
P, S = root / "model_under_test/pipeline.py", root / "model_under_test/presets.py"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


if git("status", "--porcelain", "--", "model_under_test"):
    sys.exit(f"{root}/model_under_test has uncommitted changes; use a clean checkout (this script resets it)")


def edit(path: pathlib.Path, old: str, new: str) -> None:
    """Replace the one occurrence of old by new (fails loudly when the baseline moved)."""
    text = path.read_text()
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new))


def insert_after(path: pathlib.Path, anchor: str, following: str, block: str | None = None) -> None:
    """Insert block after the line anchor (optionally: only where the text following comes next)."""
    if block is None:
        following, block = "", following
    edit(path, anchor + "\n" + following, anchor + "\n" + block + following)


def emit(name: str, subject: str, *changes: Callable[[], None]) -> None:
    """Apply the changes, write NAME.patch (1 line of context, so any subset applies), reset."""
    for change in changes:
        change()
    git("add", "-A", "model_under_test")
    diff = git("diff", "--cached", "-U1", "--", "model_under_test")
    assert diff, name
    (out / f"{name}.patch").write_text(f"Subject: {subject}\n\n{diff}")
    git("reset", "-q", "--hard")


emit("01-exact-batch-cfg", "run the two classifier-free guidance passes as one batched forward",
     lambda: edit(P, "                    eps_cond = self.predict_noise(model_input, t, labels)\n"
                     "                    eps_uncond = self.predict_noise(model_input, t, null)\n",
                     "                    both = self.predict_noise(torch.cat([model_input, model_input]), t, torch.cat([labels, null]))\n"
                     "                    eps_cond, eps_uncond = both.chunk(2)\n"))

emit("02-exact-sdpa-math-backend", "route the 256-token fp32 attention to SDPA's math backend (batched GEMMs + softmax)",
     lambda: insert_after(P, "from torch.profiler import record_function",
                          "from torch.nn.attention import SDPBackend, sdpa_kernel\n"),
     lambda: edit(P, "        out = self.transformer(\n"
                     "            latents.to(dtype), timestep=self._timestep_batch(t, latents.shape[0]), class_labels=labels\n"
                     "        ).sample\n",
                     "        with sdpa_kernel(SDPBackend.MATH):  # the default picks the memory-efficient kernel for fp32\n"
                     "            out = self.transformer(\n"
                     "                latents.to(dtype), timestep=self._timestep_batch(t, latents.shape[0]), class_labels=labels\n"
                     "            ).sample\n"))

emit("03-exact-fused-qkv", "fuse the q, k and v projections of every self-attention into one GEMM",
     lambda: insert_after(P, "        self.transformer = transformer", "        self.scheduler = scheduler\n        self.vae = vae\n",
                          "        if self.device.type == \"cuda\":  # one [3*1152, 1152] GEMM instead of three\n"
                          "            from diffusers.models.attention_processor import FusedAttnProcessor2_0\n"
                          "\n"
                          "            for block in transformer.transformer_blocks:\n"
                          "                block.attn1.fuse_projections()\n"
                          "                block.attn1.set_processor(FusedAttnProcessor2_0())\n"))

emit("04-exact-regional-compile", "regional torch.compile: compile the repeated transformer block once, reuse it 28 times",
     lambda: insert_after(P, "        self.scheduler = scheduler", "        self.vae = vae\n        self.label_fn",
                          "        if self.device.type == \"cuda\":  # one compiled graph shared by the identical blocks\n"
                          "            for block in transformer.transformer_blocks:\n"
                          "                block.compile()\n"))

emit("05-exact-whole-compile", "whole-model torch.compile of the DiT forward (inductor, default mode)",
     lambda: insert_after(P, "        self.vae = vae", "        self.label_fn",
                          "        if self.device.type == \"cuda\":  # the whole forward as one graph; module hooks stay eager\n"
                          "            transformer.forward = torch.compile(type(transformer).forward.__get__(transformer))\n"))

emit("06-exact-cuda-graphs", "CUDA graphs: the whole DiT forward compiled in reduce-overhead mode",
     lambda: insert_after(P, "        self.label_fn = label_fn",
                          "        if self.device.type == \"cuda\":  # replaces any earlier compile of the forward\n"
                          "            graphed = torch.compile(type(transformer).forward.__get__(transformer), mode=\"reduce-overhead\")\n"
                          "\n"
                          "            def replay(*args, **kwargs):\n"
                          "                torch.compiler.cudagraph_mark_step_begin()\n"
                          "                out = graphed(*args, **kwargs)\n"
                          "                return type(out)(sample=out.sample.clone())  # the next replay overwrites the graph's output\n"
                          "\n"
                          "            transformer.forward = replay\n"))

emit("07-numerical-bf16", "cast the DiT-XL/2 transformer to bfloat16 at run time (same fp32-initialised weights)",
     lambda: insert_after(S, "        transformer, vae = _finish(transformer, device, dtype), _finish(vae, device, dtype)",
                          "        transformer = transformer.to(torch.bfloat16)  # bf16 arithmetic, not a new model\n"))

emit("08-approximate-half-steps", "halve the number of sampling steps",
     lambda: edit(P, "        self.steps = int(steps)\n", "        self.steps = max(1, int(steps) // 2)\n"))

INT8 = '''"""Weight-only int8 Linear layers: int8 weights with one scale per output channel, dequantized per call."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class Int8WeightOnlyLinear(torch.nn.Module):
    """y = x @ (q * scale)^T + b with q int8 [out, in] and scale [out, 1] in the layer's float dtype."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0
        self.register_buffer("weight_int8", torch.round(w / scale).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale.to(linear.weight.dtype))
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight_int8.to(x.dtype) * self.scale.to(x.dtype), self.bias)


def quantize_linears(module: torch.nn.Module) -> torch.nn.Module:
    """Replace every nn.Linear below ``module`` with an Int8WeightOnlyLinear."""
    for name, child in module.named_children():
        if isinstance(child, torch.nn.Linear):
            setattr(module, name, Int8WeightOnlyLinear(child))
        else:
            quantize_linears(child)
    return module
'''

def int8():
    (root / "model_under_test/int8_weight_only.py").write_text(INT8)
    insert_after(P, "        cfg = transformer.config", "        self.null_class",
                 "        if self.device.type == \"cuda\":  # after any projection fusion, before the first (compiled) call\n"
                 "            from .int8_weight_only import quantize_linears\n\n"
                 "            quantize_linears(transformer.transformer_blocks)\n")

emit("09-quantization-int8-weight-only", "int8 weight-only Linear layers in the DiT blocks (per-channel scales)", int8)

emit("10-numerical-tf32", "let fp32 matmuls use TF32 tensor cores (10-bit mantissa inputs, fp32 accumulate)",
     lambda: insert_after(S, "    options, device, resolution, common = _common(spec, 256, 25, 4.0)",
                          "    torch.backends.cuda.matmul.allow_tf32 = True  # fp32 GEMMs on tensor cores\n"))
