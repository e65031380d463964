"""Stage attribution, FLOPs and device peaks of one side's pipeline (DESIGN §6, `dit-ar profile`).

Two halves: functions that run *inside* a worker (they receive the worker.Worker and use its built
pipeline) and functions that run in the harness (they drive a WorkerProcess and do the arithmetic).
Nothing here decides a verdict except the FLOP count and peak that `dit-ar baseline` records.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from . import roofline

STAGES = ("text_encode", "denoise", "decode")
TOP_OPS = 15
NAME_CHARS = 400  # templated CUDA kernel names run to kilobytes


# -- inside the worker --------------------------------------------------------------------------
def _run(worker: Any, requests: list[tuple[str, int]]) -> float:
    """One generate; reading a value on the host forces the device to finish. Returns denoiser rows/image."""
    worker.rows = 0
    with worker.torch.inference_mode():
        result = worker.pipe.generate(requests)
        float(result.images.float().sum())
    return worker.rows / len(requests)


def _timed(worker: Any, requests: list[tuple[str, int]]) -> float:
    start = time.perf_counter()
    _run(worker, requests)
    return time.perf_counter() - start


def count_flops(worker: Any, requests: list[tuple[str, int]]) -> dict[str, Any]:
    """FLOPs of one generate of `requests`, counted by torch.utils.flop_counter."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        rows = _run(worker, requests)
    return {"flops": int(counter.get_total_flops()), "denoiser_rows_per_image": rows}


def _event_ms(event: Any, device: bool) -> float:
    """An event's inclusive time in ms: kernel time launched inside it on a device, else its host range."""
    if device:
        return (getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0.0)) / 1e3
    return event.cpu_time_total / 1e3


def _inside_stage(event: Any) -> bool:
    parent = getattr(event, "cpu_parent", None)
    while parent is not None:
        if parent.name in STAGES:
            return True
        parent = getattr(parent, "cpu_parent", None)
    return False


def stage_times(events: Any, device: bool) -> dict[str, dict[str, float]]:
    """Host and (on CUDA) device time of the outermost stage ranges the pipeline emits (nested ones count once)."""
    from torch.autograd import DeviceType

    out: dict[str, dict[str, float]] = {}
    for evt in events:
        if (evt.name in STAGES and getattr(evt, "device_type", DeviceType.CPU) == DeviceType.CPU
                and not _inside_stage(evt)):
            cur = out.setdefault(evt.name, {"host_ms": 0.0, "device_ms": 0.0, "calls": 0})
            cur["host_ms"] += _event_ms(evt, False)
            cur["device_ms"] += _event_ms(evt, True) if device else 0.0
            cur["calls"] += 1
    return out


def top_ops(averages: Any, device: bool, n: int = TOP_OPS) -> list[dict[str, Any]]:
    """The n kernels (CUDA) or operators (CPU) with the most self time."""
    from torch.autograd import DeviceType

    def self_ms(a: Any) -> float:
        if device:
            return (getattr(a, "self_device_time_total", None) or getattr(a, "self_cuda_time_total", 0.0)) / 1e3
        return a.self_cpu_time_total / 1e3

    rows = [a for a in averages if a.key not in STAGES
            and (getattr(a, "device_type", DeviceType.CPU) != DeviceType.CPU) == device]
    rows.sort(key=self_ms, reverse=True)
    return [{"name": a.key[:NAME_CHARS], "calls": int(a.count), "self_ms": self_ms(a)}
            for a in rows[:n] if self_ms(a) > 0]


def profile_generate(worker: Any, requests: list[tuple[str, int]], trace: str | None = None,
                     repeats: int = 3) -> dict[str, Any]:
    """Warm up, time `repeats` plain generates, then one under torch.profiler and one under the FLOP counter."""
    torch = worker.torch
    from torch.profiler import ProfilerActivity, profile

    cuda = worker.device.startswith("cuda")
    warmup_s = _timed(worker, requests)
    plain_s = [_timed(worker, requests) for _ in range(max(1, repeats))]
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=False) as prof:
        profiled_s = _timed(worker, requests)
    memory = worker.memory()
    flops = count_flops(worker, requests)
    if trace:
        prof.export_chrome_trace(trace)
    return {"warmup_s": warmup_s, "plain_s": plain_s, "profiled_s": profiled_s, "cuda": cuda,
            "stages": stage_times(prof.events(), cuda), "top_ops": top_ops(prof.key_averages(), cuda),
            "memory": memory, **flops, "trace": trace}


def measure_peak(worker: Any, n: int | None = None, reps: int | None = None) -> dict[str, Any]:
    """Best-of-reps rate of an n^3 matrix product (bf16 on GPUs, fp32 on CPUs) and of a large copy."""
    torch = worker.torch
    cuda = worker.device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    n = n or (8192 if cuda else 2048)
    reps = reps or (10 if cuda else 3)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def best_of(fn: Any) -> float:
        fn()
        sync()
        best = math.inf
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            sync()
            best = min(best, time.perf_counter() - start)
        return best

    a = torch.randn(n, n, device=worker.device, dtype=dtype)
    b = torch.randn(n, n, device=worker.device, dtype=dtype)
    mm_s = best_of(functools.partial(torch.matmul, a, b))
    del a, b
    src = torch.empty((1 << 30 if cuda else 1 << 26) // 4, device=worker.device, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    copy_s = best_of(lambda: dst.copy_(src))
    nbytes = src.numel() * 4
    return {"n": n, "reps": reps, "dtype": str(dtype).replace("torch.", ""), "threads": torch.get_num_threads(),
            "tflops": 2 * n**3 / mm_s / 1e12, "bandwidth_gbs": 2 * nbytes / copy_s / 1e9}


# -- in the harness -------------------------------------------------------------------------------
def device_peak(worker: Any) -> roofline.Peak:
    """The table's peak for the worker's GPU, else one measured in the worker (always for CPUs)."""
    name = worker.device_name
    peak = roofline.lookup(name) if worker.identity.get("kind") == "cuda" else None
    return peak or roofline.measured_peak(name, worker.request("peak"))


def roofline_evidence(worker: Any, requests: list[list[Any]]) -> dict[str, Any]:
    """What `dit-ar baseline` records for the roofline flag: FLOPs of one batch and the device's peak.

    An op the FLOP counter cannot run through leaves the flag off (recorded why), not the baseline failed.
    """
    from dit_ar_contract.errors import CandidateCrash

    try:
        counted = worker.request("flops", requests=requests)
    except CandidateCrash as exc:
        return {"roofline_unavailable": f"FLOP count failed: {exc}"}
    peak = device_peak(worker)
    return {"flops_per_batch": counted["flops"], "flops_rows_per_image": counted["denoiser_rows_per_image"],
            "device_peak_tflops": peak.tflops, "device_peak": peak.as_dict()}


def describe_roofline(evidence: dict[str, Any]) -> str:
    """One line for `dit-ar baseline`'s output."""
    if "flops_per_batch" not in evidence:
        return f"roofline flag off: {evidence.get('roofline_unavailable')}"
    return (f"{evidence['flops_per_batch'] / 1e9:.3g} GFLOP per batch; device peak "
            f"{evidence['device_peak_tflops']:.3g} TFLOP/s ({evidence['device_peak']['source']})")


def summarize(raw: dict[str, Any], peak: roofline.Peak, steps: int, batch: int) -> dict[str, Any]:
    """Stage attribution, achieved rate and roofline figures from a worker's `profile` reply."""
    total_ms = raw["profiled_s"] * 1e3
    key = "device_ms" if raw["cuda"] else "host_ms"
    stages = {name: raw["stages"].get(name, {}).get(key, 0.0) for name in STAGES}
    stages["unattributed"] = max(0.0, total_ms - sum(stages.values()))
    plain_ms = sorted(raw["plain_s"])[len(raw["plain_s"]) // 2] * 1e3
    flops = raw["flops"]
    return {
        "batch": batch, "steps": steps, "total_ms": total_ms, "median_plain_ms": plain_ms,
        "warmup_ms": raw["warmup_s"] * 1e3, "stage_ms": stages, "stage_basis": key,
        "stages_found": sorted(raw["stages"]), "stage_detail": raw["stages"],
        "denoise_per_step_ms": stages["denoise"] / steps if steps else None,
        "flops_per_batch": flops, "denoiser_rows_per_image": raw["denoiser_rows_per_image"],
        "achieved_tflops": roofline.achieved_tflops(flops, plain_ms / 1e3),
        "percent_of_peak": roofline.percent_of_peak(flops, plain_ms / 1e3, peak.tflops),
        "roofline_ms": roofline.roofline_ms(flops, peak.tflops), "peak": peak.as_dict(),
        "memory": raw["memory"], "top_ops": raw["top_ops"],
        "top_ops_basis": f"self {'device' if raw['cuda'] else 'CPU'} time",
    }


_NOISE = {"void", "const", "float", "double", "char", "unsigned", "long", "int", "bool", "std", "array", "native",
          "anonymous", "namespace", "lambda", "operator", "at", "aten", "c10", "detail", "Params"}


def kernel_regex(name: str) -> str:
    """An ncu `--kernel-name-base demangled -k regex:` for a kernel: its function and its longest other word.

    Seen working with ncu on an H200: `regex:cutlass_80_simt_sgemm` picks the cutlass GEMMs only.
    """
    base = re.split(r"[<(]", name.removeprefix("void "), maxsplit=1)[0].strip()
    function = re.split(r"::|\s", base)[-1] or base
    words = {w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]{3,}", name) if w not in _NOISE and w != function}
    longest = max(sorted(words), key=len, default="")
    return re.escape(function) + (f".*{re.escape(longest)}" if longest else "")


def deeper_commands(config: Path, lane: str, run_dir: Path, top: list[dict[str, Any]]) -> dict[str, str]:
    """nsys and ncu command lines around `dit-ar profile --once` (one steady-state generate, CUDA lanes).

    `--once` runs that generate between cudaProfilerStart/Stop with emit_nvtx on; emit_nvtx names the
    stage ranges "denoise, op_id = N", so ncu's NVTX filter needs the regex form (seen on an H200).
    """
    once = (f"{shlex.quote(sys.executable)} -m pytest_dit_ar.cli --config {shlex.quote(str(config))} "
            f"profile --once --lane {shlex.quote(lane)}")
    out = shlex.quote(str(run_dir))
    kernel = shlex.quote("regex:" + (kernel_regex(top[0]["name"]) if top else "."))
    return {
        "nsys": f"nsys profile -t cuda,nvtx,osrt --capture-range=cudaProfilerApi --capture-range-end=stop "
                f"-o {out}/nsys-generate {once}",
        "nsys_stats": f"nsys stats -r cuda_gpu_kern_sum,nvtx_sum {out}/nsys-generate.nsys-rep",
        "ncu": f"ncu --profile-from-start off --clock-control none --nvtx --nvtx-include 'regex:denoise/' "
               f"--kernel-name-base demangled -k {kernel} -c 5 --set full -o {out}/ncu-top-kernel {once}",
    }


BASIS = {"host_ms": "host time inside each range",
         "device_ms": "kernel time launched inside each range; unattributed = idle gaps, launches, profiler"}


def format_table(info: dict[str, Any]) -> list[str]:
    """The readable report of `dit-ar profile`."""
    s, peak, mem = info["summary"], info["summary"]["peak"], info["summary"]["memory"]
    total = s["total_ms"]
    lines = [f"dit-ar profile: lane {info['lane_id']} on {info['device']}  commit {info['commit']}",
             f"batch {s['batch']}, {s['steps']} steps; one profiled generate {total:.1f} ms "
             f"(plain median {s['median_plain_ms']:.1f} ms, first call {s['warmup_ms']:.1f} ms)",
             f"{'stage':<14}{'ms':>10}{'share':>8}   ({BASIS[s['stage_basis']]})"]
    for name, ms in s["stage_ms"].items():
        extra = f"   {s['denoise_per_step_ms']:.2f} ms/step" if name == "denoise" and s["denoise_per_step_ms"] else ""
        lines.append(f"{name:<14}{ms:>10.2f}{100 * ms / total if total else 0:>7.1f}%{extra}")
    missing = [n for n in STAGES if n not in s["stages_found"]]
    if missing:
        lines.append(f"(no record_function range for {', '.join(missing)}: its time is in 'unattributed')")
    lines += [f"FLOPs per batch {s['flops_per_batch'] / 1e9:.2f} GFLOP; achieved {s['achieved_tflops']:.3f} TFLOP/s = "
              f"{s['percent_of_peak']:.1f}% of {peak['tflops']:.3g} TFLOP/s ({peak['source']})",
              f"roofline floor {s['roofline_ms']:.3f} ms per batch; memory: " +
              ", ".join(f"{k} {v:.0f} MB" for k, v in mem.items()),
              f"top {len(s['top_ops'])} by {s['top_ops_basis']}:"]
    lines += [f"  {op['self_ms']:>9.2f} ms {op['calls']:>6}x  {op['name'][:90]}" for op in s["top_ops"]]
    lines += [f"trace: {info['trace']}", f"json:  {info['json']}",
              "deeper (CUDA lanes; `--once` runs one steady-state generate between cudaProfilerStart/Stop):"]
    lines += [f"  {cmd}" for cmd in info["commands"].values()]
    return lines


def run_once(pipe: Any, requests: list[tuple[str, int]], cuda: bool, warmup: int = 2) -> float:
    """In this process: warm up, then one generate inside cudaProfilerStart/Stop with NVTX ranges."""
    import torch

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with torch.inference_mode():
        for _ in range(warmup):
            pipe.generate(requests)
        sync()
        with contextlib.ExitStack() as stack:
            if cuda:
                stack.enter_context(torch.cuda.profiler.profile())
                stack.enter_context(torch.autograd.profiler.emit_nvtx(record_shapes=False))
            start = time.perf_counter()
            pipe.generate(requests)
            sync()
            return time.perf_counter() - start
