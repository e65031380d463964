"""H200 probe: does Inductor's compile pool slow a worker that loads its compiled graphs
from a warm cache, and does CUDA-graph capture (reduce-overhead) add speed on top of regional compile?

  python3 lab/probes/compile_pool_probe.py        (kind nvidia-h200; writes $OUT/probe-pool.json)

Each case is a fresh process pinned to cores 2,3 (the harness's timing cores) that builds DiT-XL/2 at 256x256
(diffusers, seeded random weights, fp32), compiles as the case says with TORCHINDUCTOR_CACHE_DIR shared between
cases, and then times generates (8 steps x 2 forwards at batch 2, as the lane) back to back for SECONDS,
reporting the first generate and the generate times in 2-second bins: a background pool importing torch shows
as slow bins after the first.
  regional-cold      blocks compiled, empty cache (default compile threads: the pool compiles)
  regional-warm      the same tree again, warm cache, default compile threads (the pool starts on the load)
  regional-warm-1    warm cache, TORCHINDUCTOR_COMPILE_THREADS=1 (no pool: what the harness now sets)
  graphs-cold-1      patch 06 on top of 04 (whole forward in reduce-overhead mode over compiled blocks), cold
"""
import json
import os
import subprocess
import sys
import time

OUT = os.environ.get("OUT", "/tmp/out")
SECONDS = float(os.environ.get("SECONDS_PER_CASE", 14))
CACHE = "/tmp/wave5-pool-cache"


def child(case: str) -> None:
    os.sched_setaffinity(0, {2, 3})
    t0 = time.perf_counter()
    sys.path.insert(0, os.path.dirname(__file__))
    import torch
    from mode_fork_compile_probe import build
    m, gen = build()
    for block in m.transformer_blocks:
        block.compile()
    skipped = []
    if case.startswith("graphs"):
        graphed = torch.compile(type(m).forward.__get__(m), mode="reduce-overhead")

        def replay(*a, **k):
            torch.compiler.cudagraph_mark_step_begin()
            out = graphed(*a, **k)
            return type(out)(sample=out.sample.clone())
        m.forward = replay
    built = time.perf_counter() - t0
    t = time.perf_counter()
    gen()
    first = time.perf_counter() - t
    times, stamps, start = [], [], time.perf_counter()
    while time.perf_counter() - start < SECONDS:
        t = time.perf_counter()
        gen()
        times.append(time.perf_counter() - t)
        stamps.append(t - start)
    bins = {}
    for s, x in zip(stamps, times):
        bins.setdefault(int(s // 2) * 2, []).append(x)
    from torch._dynamo.utils import counters
    print(json.dumps({"case": case, "build_s": built, "first_generate_s": first,
                      "median_ms": 1000 * sorted(times)[len(times) // 2], "n": len(times),
                      "bins_median_ms": {k: round(1000 * sorted(v)[len(v) // 2], 1) for k, v in bins.items()},
                      "bins_max_ms": {k: round(1000 * max(v), 1) for k, v in bins.items()},
                      "inductor": {k: v for k, v in counters["inductor"].items() if "cache" in k or "cudagraph" in k},
                      "stats": dict(counters["stats"]), "skipped": skipped}), flush=True)


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    subprocess.run(["rm", "-rf", CACHE])
    results = []
    for case, threads in (("regional-cold", None), ("regional-warm", None), ("regional-warm-1", "1"),
                          ("graphs-cold-1", "1")):
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": CACHE, "TRITON_CACHE_DIR": CACHE + "/triton",
               "TORCH_LOGS": "perf_hints"}
        env.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
        if threads:
            env["TORCHINDUCTOR_COMPILE_THREADS"] = threads
        t = time.perf_counter()
        p = subprocess.run([sys.executable, __file__, "--child", case], env=env, capture_output=True, text=True,
                           timeout=240)
        line = next((x for x in p.stdout.splitlines() if x.startswith("{")), None)
        res = json.loads(line) if line else {"case": case, "error": p.stderr[-1500:]}
        res["process_wall_s"] = time.perf_counter() - t
        res["cudagraph_hints"] = [x[-300:] for x in p.stderr.splitlines() if "cudagraph" in x.lower()][:5]
        print(json.dumps(res), flush=True)
        results.append(res)
        with open(os.path.join(OUT, "probe-pool.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    child(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[1] == "--child" else main()
