"""Three H200 probes, independent of the harness's code: the eager mode, forked workers, compile start-up.

  python3 lab/probes/mode_fork_compile_probe.py mode      # does a harness-owned probe capture the eager fast/slow mode?
  python3 lab/probes/mode_fork_compile_probe.py fork      # fresh workers from a zygote that imported torch + diffusers
  python3 lab/probes/mode_fork_compile_probe.py compile   # torch.compile cold start vs warm start on a kept cache folder
Each prints JSON lines and writes $OUT/probe-<name>.json. DiT-XL/2 at 256x256 (diffusers, seeded random
weights), one generate = STEPS steps x 2 forwards at batch 2, as the dit-xl2-256 lane at 8 steps.

mode: three processes pinned to one core (CORE, default 2): a probe P (harness-owned, fixed code) and two
identical eager fp32 workers A and B. Each round: P times a CPU spin and a burst of small CUDA launches, then
one side generates; then P again, then the other side (balanced order AB/BA). Question: how much of the A/B
log ratio's variance does log(probe before A / probe before B) explain (rho^2, the CUPED gain), and does a
probe after a side differ from one before it (the aftermath a candidate could exploit)?
"""
import json
import math
import os
import statistics
import subprocess
import sys
import time

OUT = os.environ.get("OUT", "/tmp/out")
STEPS = int(os.environ.get("STEPS", 8))
ROUNDS = int(os.environ.get("ROUNDS", 40))
CORE = int(os.environ.get("CORE", 2))


def build(dtype_name="fp32"):
    import torch
    from diffusers import DiTTransformer2DModel
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    with torch.device("cuda"):
        m = DiTTransformer2DModel(num_attention_heads=16, attention_head_dim=72, in_channels=4, out_channels=8,
                                  num_layers=28, sample_size=32, patch_size=2, num_embeds_ada_norm=1000).eval()
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    m.to(dtype)
    x = torch.randn(2, 4, 32, 32, device="cuda", dtype=dtype)
    t = torch.full((2,), 500, device="cuda", dtype=torch.long)
    yc, yu = torch.tensor([1, 2], device="cuda"), torch.tensor([1000, 1000], device="cuda")

    def gen(model=m):
        lat = x
        with torch.no_grad():
            for _ in range(STEPS):
                ec = model(lat, timestep=t, class_labels=yc).sample[:, :4]
                eu = model(lat, timestep=t, class_labels=yu).sample[:, :4]
                lat = lat - 0.01 * (eu + 4.0 * (ec - eu))
        torch.cuda.synchronize()
        return lat
    return m, gen


def serve(kind):
    """A child: answers 'run' lines with one JSON line of timings."""
    os.sched_setaffinity(0, {CORE})
    import torch
    if kind == "probe":
        small = torch.zeros(64, device="cuda")
        torch.cuda.synchronize()
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)

        def once():
            t = time.perf_counter(); s = 0
            for i in range(200_000):
                s += i * i
            spin = time.perf_counter() - t
            t = time.perf_counter()
            for _ in range(400):
                small.add_(1.0)
            torch.cuda.synchronize()
            launch = time.perf_counter() - t
            return {"spin_ms": spin * 1e3, "launch_ms": launch * 1e3,
                    "sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)}
        work = once
    else:
        _, gen = build()
        for _ in range(3):
            gen()

        def work():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); gen(); b.record(); torch.cuda.synchronize()
            return {"gpu_ms": a.elapsed_time(b)}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        print(json.dumps(work()), flush=True)


class Child:
    def __init__(self, kind):
        self.p = subprocess.Popen([sys.executable, __file__, "serve", kind], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)

    def ready(self):
        json.loads(self.p.stdout.readline())
        return self

    def run(self):
        t = time.perf_counter()
        self.p.stdin.write("run\n"); self.p.stdin.flush()
        r = json.loads(self.p.stdout.readline())
        r["wall_ms"] = (time.perf_counter() - t) * 1e3
        return r

    def close(self):
        self.p.stdin.write("exit\n"); self.p.stdin.flush(); self.p.wait(30)


def r2(xs, ys):
    if len(xs) < 3 or statistics.pstdev(xs) == 0 or statistics.pstdev(ys) == 0:
        return 0.0
    return statistics.correlation(xs, ys) ** 2


def mode():
    os.sched_setaffinity(0, {c for c in os.sched_getaffinity(0) if c != CORE} or {CORE})
    probe, a, b = (c.ready() for c in [Child("probe"), Child("worker"), Child("worker")])
    rows = []
    for i in range(ROUNDS):
        order = "ab" if i % 2 == 0 else "ba"
        row = {"order": order, "t": time.time()}
        for side in order:
            row[f"pre_{side}"] = probe.run()
            row[side] = (a if side == "a" else b).run()
            row[f"post_{side}"] = probe.run()
        rows.append(row)
        print(json.dumps(row), flush=True)
    for c in (probe, a, b):
        c.close()
    y = [math.log(r["a"]["wall_ms"] / r["b"]["wall_ms"]) for r in rows]
    summary = {"rounds": len(rows), "core": CORE, "sd_log_ratio": statistics.pstdev(y),
               "a_ms": [r["a"]["wall_ms"] for r in rows], "b_ms": [r["b"]["wall_ms"] for r in rows]}
    for key in ("spin_ms", "launch_ms"):
        x = [math.log(r["pre_a"][key] / r["pre_b"][key]) for r in rows]
        theta = (statistics.covariance(x, y) / statistics.variance(x)) if statistics.variance(x) else 0.0
        adj = [yi - theta * xi for xi, yi in zip(x, y)]
        summary[f"rho2_{key}"] = r2(x, y)
        summary[f"sd_adjusted_{key}"] = statistics.pstdev(adj)
        # the aftermath: probe right after a side vs right before the next
        after = [math.log(r[f"post_{s}"][key] / r[f"pre_{s}"][key]) for r in rows for s in "ab"]
        summary[f"post_over_pre_mean_{key}"] = statistics.fmean(after)
        summary[f"rho2_level_{key}"] = r2([math.log(r["pre_a"][key]) for r in rows],
                                          [math.log(r["a"]["wall_ms"]) for r in rows])
    summary["sm_mhz_range"] = [min(r[f"pre_{s}"]["sm_mhz"] for r in rows for s in "ab"),
                               max(r[f"pre_{s}"]["sm_mhz"] for r in rows for s in "ab")]
    return summary


FORK_CHILD_STEPS = 3


def fork_children(n, concurrent):
    """The parent imported torch, diffusers and transformers without touching CUDA; children build and run."""
    res, pids = [], []
    for _ in range(n):
        rd, wr = os.pipe()
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.close(rd)
            r = {}
            try:
                t = time.perf_counter()
                _, gen = build()
                r["build_s"] = time.perf_counter() - t
                t = time.perf_counter(); gen(); r["first_generate_s"] = time.perf_counter() - t
                r["ready_s"] = time.perf_counter() - t0
                times = []
                for _ in range(FORK_CHILD_STEPS):
                    t = time.perf_counter(); gen(); times.append(time.perf_counter() - t)
                r["generate_s"] = times
            except Exception as e:  # noqa: BLE001
                r["error"] = repr(e)[:300]
            os.write(wr, (json.dumps(r) + "\n").encode())
            os._exit(0)
        os.close(wr)
        pids.append((pid, rd, t0))
        if not concurrent:
            res.append(_collect(*pids.pop()))
    res += [_collect(*p) for p in pids]
    return res


def _collect(pid, rd, t0):
    data = b""
    while chunk := os.read(rd, 65536):
        data += chunk
    os.waitpid(pid, 0)
    r = json.loads(data.decode().strip().splitlines()[-1])
    r["wall_s"] = time.perf_counter() - t0
    return r


def fork():
    t = time.perf_counter()
    import diffusers  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from diffusers import DiTTransformer2DModel  # noqa: F401
    prelude = time.perf_counter() - t
    out = {"prelude_import_s": prelude, "nvml_check": os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK"),
           "cuda_initialised_in_parent": torch.cuda.is_initialized()}
    out["sequential"] = fork_children(3, concurrent=False)
    out["concurrent_2"] = fork_children(2, concurrent=True)
    out["cuda_initialised_in_parent_after"] = torch.cuda.is_initialized()
    return out


COMPILE_CHILD = r'''
import json, os, sys, time
t0 = time.perf_counter()
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import torch
from mode_fork_compile_probe import build
how = sys.argv[2]
m, gen = build("bf16")
if how == "regional":
    for blk in m.transformer_blocks:
        blk.compile()
elif how == "whole":
    m.compile()
elif how == "graphs":
    m.compile(mode="reduce-overhead")
t = time.perf_counter(); gen(); first = time.perf_counter() - t
warm = []
for _ in range(5):
    t = time.perf_counter(); gen(); warm.append(time.perf_counter() - t)
steady = []
for _ in range(5):
    t = time.perf_counter(); gen(); steady.append(time.perf_counter() - t)
print(json.dumps({"how": how, "start_to_first_done_s": time.perf_counter() - t0 - sum(warm) - sum(steady),
                  "first_generate_s": first, "warm_generates_s": warm, "steady_generates_s": steady}))
'''


def compile_():
    import tempfile
    results = []
    for how in os.environ.get("COMPILE_KINDS", "eager,regional,whole,graphs").split(","):
        cache = tempfile.mkdtemp(prefix=f"cache-{how}-")
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor", "TRITON_CACHE_DIR": f"{cache}/triton"}
        for phase in ("cold", "warm"):
            t = time.perf_counter()
            p = subprocess.run([sys.executable, "-c", COMPILE_CHILD, __file__, how], env=env, capture_output=True,
                               text=True, timeout=int(os.environ.get("COMPILE_TIMEOUT", 240)))
            r = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr[-800:]}
            r.update(phase=phase, process_wall_s=time.perf_counter() - t,
                     cache_mb=sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(cache) for f in fs) / 1e6)
            print(json.dumps(r), flush=True)
            results.append(r)
            if how == "eager":
                break
    return results


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "serve":
        serve(sys.argv[2])
        sys.exit(0)
    os.makedirs(OUT, exist_ok=True)
    result = {"mode": mode, "fork": fork, "compile": compile_}[what]()
    with open(os.path.join(OUT, f"probe-{what}.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, list)} if isinstance(result, dict)
                     else result)[:3000], flush=True)
