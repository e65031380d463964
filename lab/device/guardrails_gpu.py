"""The steady-state guardrails' GPU figures on one GPU (no verdict; every figure is a harness measurement).

  python3 lab/device/guardrails_gpu.py --out DIR

1. Clock trace (loop/speed/clean_rounds.py `NvmlWatch.trace`, state/clocks.py): the SM clock sampled every 20 ms while
   the GPU idles for 0.5 s, then while a bf16 8192^3 matmul loop runs for `--burn-s` seconds; each span's line
   ("SM clock <MHz> of <max> MHz for <s> s of <t> s; <reasons>") and whether it fell.
2. Compile transient against the steady peak (worker/gpu_memory.py `MemorySampler`, NVML per process): a child
   process compiles a small transformer (torch.compile, `--mode`), runs 3 warm-up calls, says "warm", runs 10
   more; the parent samples the child's device memory from outside and marks the steady state at "warm". The
   whole-run peak and the steady peak in MB.
Writes DIR/guardrails_gpu.json and prints it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

CHILD = r'''
import sys, torch
mode = sys.argv[1]
layer = torch.nn.TransformerEncoderLayer(1152, 16, 4608, batch_first=True, device="cuda", dtype=torch.bfloat16)
model = torch.nn.TransformerEncoder(layer, 8).eval()
run = torch.compile(model, mode=None if mode == "default" else mode)
x = torch.randn(8, 256, 1152, device="cuda", dtype=torch.bfloat16)
with torch.inference_mode():
    for _ in range(3):
        run(x); torch.cuda.synchronize()
    print("warm", flush=True)
    for _ in range(10):
        run(x); torch.cuda.synchronize()
print("allocated_peak_mb", torch.cuda.max_memory_allocated() / 2**20, flush=True)
'''


def clock_trace(burn_s: float) -> dict:
    import pynvml
    import torch

    from pytest_dit_ar.loop.speed.clean_rounds import NvmlWatch

    pynvml.nvmlInit()
    uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
    watch = NvmlWatch([uuid.decode() if isinstance(uuid, bytes) else uuid])
    out = {}
    trace = watch.trace()
    time.sleep(0.5)
    out["idle"] = [(s.describe(), s.fell) for s in trace.stop()]
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    trace = watch.trace()
    end = time.perf_counter() + burn_s
    while time.perf_counter() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()
    out["matmul"] = [(s.describe(), s.fell) for s in trace.stop()]
    return out


def compile_memory(mode: str) -> dict:
    from pytest_dit_ar.worker.gpu_memory import MemorySampler, nvml_reader

    child = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE, text=True)

    class One:
        def processes(self) -> list[int]:
            return [child.pid]

    sampler = MemorySampler(nvml_reader({"child": One()}), 0.05).start()
    lines = []
    for line in child.stdout:
        lines.append(line.strip())
        if line.startswith("warm"):
            sampler.mark_steady()
    child.wait()
    sampler.stop()
    return {"mode": mode, "whole_run_peak_mb": sampler.peak("child"), "steady_peak_mb": sampler.steady_peak("child"),
            "child": lines, "samples": sampler.samples, "error": sampler.error}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--burn-s", type=float, default=3.0)
    parser.add_argument("--mode", default="max-autotune-no-cudagraphs")
    args = parser.parse_args()
    result = {"clock": clock_trace(args.burn_s), "compile": [compile_memory("default"), compile_memory(args.mode)]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "guardrails_gpu.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
