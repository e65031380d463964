"""Stage attribution, FLOPs and device peaks of one side's pipeline (docs/design/speed-verdict.md, `dit-ar profile`).

Two halves: functions that run *inside* a worker (they receive the worker.Worker and use its built
pipeline) and functions that run in the harness (they drive a WorkerProcess and do the arithmetic).
Nothing here decides a verdict except the FLOP count and peak that `dit-ar baseline` records.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from . import roofline
from .stage_clock import OUTSIDE, STAGES, GraphLedger, clocked_generate

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


def _generate(torch: Any, pipe: Any, requests: list[tuple[str, int]]) -> None:
    with torch.inference_mode():
        float(pipe.generate(requests).images.float().sum())


FLOPS_METHODS = {
    "dispatched": "the operators one generate dispatched (torch.utils.flop_counter)",
    "replica": "a replica of the same candidate built under the counter: each CUDA graph's operators counted "
               "once at its capture, then a steady generate's operators plus its replays times their graphs' FLOPs",
}


def count_flops(worker: Any, requests: list[tuple[str, int]], replica: bool = False) -> dict[str, Any]:
    """FLOPs of one steady generate of `requests`, counted by torch.utils.flop_counter.

    A CUDA graph replay dispatches no operator, so a graphed pipeline's count misses its replays; they are
    counted (`graph_replays`). With `replica`, such a pipeline is counted again on a fresh build of the same
    candidate (`replica_flops`)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, GraphLedger(worker.torch) as ledger:
        rows = _run(worker, requests)
    out: dict[str, Any] = {"flops": int(counter.get_total_flops()), "denoiser_rows_per_image": rows,
                           "graph_replays": len(ledger.replays), "flops_method": "dispatched"}
    if ledger.replays and replica:
        out.update(replica_flops(worker, requests))
    return out


def replica_flops(worker: Any, requests: list[tuple[str, int]]) -> dict[str, Any]:
    """FLOPs of a graphed pipeline's steady generate, counted on a replica built under the counter.

    The replica is the same candidate built again from the same spec (`worker.replica()`); torch.compile compiles
    nothing new while a counting mode is active (new code runs eager, unfused), and compiled code that does run
    still calls its GEMMs and attention through the dispatcher the counter sits on. Its build and first
    generate capture its graphs, each graph's operators counted once; its second generate counts its eager
    operators plus, for every replay, the FLOPs its graph captured. Replays of a graph captured out of sight
    (none is expected: the build is counted too) leave the dispatched count in place, with the reason."""
    torch = worker.torch
    from torch.utils.flop_counter import FlopCounterMode

    pipe = None
    try:
        with FlopCounterMode(display=False) as counter, \
                GraphLedger(torch, flops=counter.get_total_flops) as ledger:
            pipe = worker.replica()
            _generate(torch, pipe, requests)  # warm-up and capture
            since, before = ledger.mark(), counter.get_total_flops()
            _generate(torch, pipe, requests)
            replayed, unseen = ledger.replayed_flops(since)
            steady = int(counter.get_total_flops() - before + replayed)
    except Exception as exc:  # the replica is evidence for a report, not a verdict: say why it is missing
        return {"replica_error": f"{type(exc).__name__}: {exc}"}
    finally:
        del pipe
        gc.collect()  # the replica's graphs and their memory pools go with it
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    if unseen:
        return {"replica_error": f"{unseen} replays of graphs captured out of the counter's sight"}
    return {"flops": steady, "flops_method": "replica", "replica_replays": len(ledger.replays) - since}


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
    clocked = [clocked_generate(torch, cuda, functools.partial(_run, worker, requests))
               for _ in range(max(1, repeats))]
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=False) as prof:
        profiled_s = _timed(worker, requests)
    memory = worker.memory()
    flops = count_flops(worker, requests, replica=True)
    if trace:
        prof.export_chrome_trace(trace)
    median = sorted(clocked, key=lambda c: c.total_ms)[len(clocked) // 2]
    return {"warmup_s": warmup_s, "plain_s": [c.total_ms / 1e3 for c in clocked], "profiled_s": profiled_s,
            "cuda": cuda, "clocked": median.as_dict(), "stages": stage_times(prof.events(), cuda),
            "top_ops": top_ops(prof.key_averages(), cuda), "memory": memory, **flops, "trace": trace}


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
            "flops_graph_replays": counted.get("graph_replays", 0),
            "device_peak_tflops": peak.tflops, "device_peak": peak.as_dict()}


def describe_roofline(evidence: dict[str, Any]) -> str:
    """One line for `dit-ar baseline`'s output."""
    if "flops_per_batch" not in evidence:
        return f"roofline flag off: {evidence.get('roofline_unavailable')}"
    hidden = evidence.get("flops_graph_replays") or 0
    return (f"{evidence['flops_per_batch'] / 1e9:.3g} GFLOP per batch"
            + (f" (not counted: {hidden} CUDA graph replays; the floor is lower than the work)" if hidden else "")
            + f"; device peak {evidence['device_peak_tflops']:.3g} TFLOP/s ({evidence['device_peak']['source']})")


def summarize(raw: dict[str, Any], peak: roofline.Peak, steps: int, batch: int) -> dict[str, Any]:
    """Stage attribution, achieved rate and roofline figures from a worker's `profile` reply.

    The stage times are the clocked plain generate's (the median of the plain ones; `perf_suite.stage_clock`):
    they add up to its latency. The profiler's per-range kernel and host times stay in `stage_detail`."""
    clocked = raw["clocked"]
    total_ms = clocked["total_ms"]
    stages = {name: clocked["stage_ms"].get(name, 0.0) for name in STAGES}
    stages[OUTSIDE] = clocked["outside_ms"]
    plain_ms = sorted(raw["plain_s"])[len(raw["plain_s"]) // 2] * 1e3
    flops = raw["flops"]
    dominant = max(STAGES, key=lambda name: stages[name])
    return {
        "batch": batch, "steps": steps, "total_ms": total_ms, "median_plain_ms": plain_ms,
        "profiled_ms": raw["profiled_s"] * 1e3, "warmup_ms": raw["warmup_s"] * 1e3, "stage_ms": stages,
        "stage_basis": "critical_path", "stages_found": sorted(clocked["stage_ms"]),
        "dominant_stage": dominant, "dominant_share": stages[dominant] / total_ms if total_ms else 0.0,
        "stage_host_ms": clocked["host_ms"], "graph_replays": clocked["replays"],
        "graph_replay_device_ms": clocked["replay_device_ms"], "stage_detail": raw["stages"],
        "stage_detail_basis": "device_ms" if raw["cuda"] else "host_ms",
        "denoise_per_step_ms": stages["denoise"] / steps if steps else None,
        "flops_per_batch": flops, "flops_method": raw.get("flops_method", "dispatched"),
        "flops_replica_error": raw.get("replica_error"), "denoiser_rows_per_image": raw["denoiser_rows_per_image"],
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


STAGE_BASIS = ("critical path of the median plain generate: a stage ends when its host code returned and the "
               "device finished what it queued (CUDA events at the record_function boundaries)")


def _stage_lines(s: dict[str, Any]) -> list[str]:
    total = s["total_ms"]
    lines = [f"{'stage':<14}{'ms':>10}{'share':>8}   ({STAGE_BASIS})"]
    for name, ms in s["stage_ms"].items():
        extra = f"   {s['denoise_per_step_ms']:.2f} ms/step" if name == "denoise" and s["denoise_per_step_ms"] else ""
        replays = s["graph_replays"].get(name)
        if replays:
            device = s["graph_replay_device_ms"].get(name)
            extra += f"   {replays} CUDA graph replays" + (f", {device:.2f} ms on the device" if device else "")
        lines.append(f"{name:<14}{ms:>10.2f}{100 * ms / total if total else 0:>7.1f}%{extra}")
    missing = [n for n in STAGES if n not in s["stages_found"]]
    if missing:
        lines.append(f"(no record_function range for {', '.join(missing)}: its time is in '{OUTSIDE}')")
    lines.append(f"dominant stage: {s['dominant_stage']} ({100 * s['dominant_share']:.0f}% of the generate)")
    return lines


def format_table(info: dict[str, Any]) -> list[str]:
    """The readable report of `dit-ar profile`."""
    s, peak, mem = info["summary"], info["summary"]["peak"], info["summary"]["memory"]
    lines = [f"dit-ar profile: lane {info['lane_id']} on {info['device']}  commit {info['commit']}",
             f"batch {s['batch']}, {s['steps']} steps; median plain generate {s['median_plain_ms']:.1f} ms "
             f"(under the profiler {s['profiled_ms']:.1f} ms, first call {s['warmup_ms']:.1f} ms)"]
    lines += _stage_lines(s)
    rows = s["denoiser_rows_per_image"]
    if not rows and sum(s["graph_replays"].values()):
        lines.append("denoiser rows per image: 0 seen (its passes ran inside the CUDA graph replays above)")
    method = FLOPS_METHODS[s["flops_method"]]
    if s.get("flops_replica_error"):
        method += f"; a graphed pipeline's replays are NOT counted (replica: {s['flops_replica_error']})"
    lines += [f"FLOPs per batch {s['flops_per_batch'] / 1e9:.2f} GFLOP, counted from {method}",
              f"achieved {s['achieved_tflops']:.3f} TFLOP/s over the median plain generate = "
              f"{s['percent_of_peak']:.1f}% of {peak['tflops']:.3g} TFLOP/s ({peak['source']})",
              f"roofline floor {s['roofline_ms']:.3f} ms per batch; memory: " +
              ", ".join(f"{k} {v:.0f} MB" for k, v in mem.items()),
              f"top {len(s['top_ops'])} by {s['top_ops_basis']} (torch.profiler; kernels of CUDA graph replays "
              f"appear only where the profiler traces them):"]
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
