"""Fork servers and clean rounds on one GPU (driver of fork_servers_gpu.sh; writes JSON under OUT).

  python3 lab/device/fork_servers_gpu.py --lane dit-xl2-256 --steps 8 --pairs 8 --rounds 6 --out DIR

1. Cold against forked: an exec'd pair (the harness's worker, sandboxed) and each side's fork servers
   start at the same moment; per side: spawn-to-hello and build of the exec'd worker, spawn-to-hello of each
   fork server (the pool's ready time).
2. `--pairs` pairs forked from the fork servers (round-robin over `--per-side` servers a side), each timed
   like a segment (`--warmup` rounds, then `--rounds` rounds in balanced order) with the GPU watch on:
   fork-to-hello, build, per-round order/times/NVML clock, power, temperature, throttle reasons, idle wait.
   Pairs alternate (one, two, two, one, ...) between both workers pinned to one core (`--one`) and to two
   cores (`--two`), so that each fork server serves both settings: the spread of the pairs' mean log ratios
   under each, and each pair's fork server (`zygote`: pair i from server i mod per-side).
3. The exec'd pair timed once the same way (a cold pair's segment beside the forked ones).
No verdict is taken; every figure is a harness measurement (no worker-reported time is used).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from dit_ar_contract import device
from dit_ar_contract.config import load_config
from pytest_dit_ar.loop.speed.measurement import Pair, Side, gpu_watch, run_segment, spawn_pair
from pytest_dit_ar.worker.client import SandboxPolicy, WorkerLauncher
from pytest_dit_ar.worker.forkserver import ForkServers
from quality_suite.corpora import load_corpus


def mean_log_ratio(seg) -> float:
    return statistics.fmean(math.log(c / b) for c, b in zip(seg.cand_s, seg.best_s))


def segment_data(seg, pair: Pair, cores: str) -> dict:
    return {"cores": cores, "cand_s": seg.cand_s, "best_s": seg.best_s, "orders": seg.orders,
            "warmup_s": seg.warmup_s, "build_s": seg.build_s, "ready_s": seg.ready_s, "forked": seg.forked,
            "mean_log_ratio": mean_log_ratio(seg), "rounds": [r.as_dict() for r in seg.rounds],
            "memory": seg.memory}


def watch_for(pair: Pair, is_cuda: bool):
    from dit_ar_contract.errors import Refused
    from pytest_dit_ar.loop.speed.clean_rounds import NoGpu

    try:
        return gpu_watch(pair, is_cuda)
    except Refused as exc:  # no NVML binding: rounds are still timed, without GPU readings
        print("no GPU watch:", exc, flush=True)
        return NoGpu()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lane", default="dit-xl2-256")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--per-side", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--one", default="2")
    ap.add_argument("--two", default="2,3")
    ap.add_argument("--deadline-s", type=float, default=130.0)
    ap.add_argument("--unsandboxed", action="store_true")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    started = time.perf_counter()
    a.out.mkdir(parents=True, exist_ok=True)
    config = load_config()
    lane = config.lane(a.lane)
    target = device.resolve_lane(config, lane)
    policy = None if a.unsandboxed else SandboxPolicy((), lane.is_cuda, (config.root.resolve(),))
    launcher = WorkerLauncher(target, lane.performance.threads, 300.0, policy)
    root = config.root
    spec = {**lane.workload(launcher.model_root(root), root), "steps": a.steps}
    prompts = tuple(c.prompt for c in load_corpus(root / lane.corpus))
    logs = Path(tempfile.mkdtemp(prefix="wave4-fs-"))
    side = Side("x", root, spec)
    result: dict = {"lane": a.lane, "steps": a.steps, "sandboxed": policy is not None,
                    "args": {**vars(a), "out": str(a.out)}}
    rng = random.SystemRandom()

    # 1. cold pair and fork servers started together
    t0 = time.perf_counter()
    forks = ForkServers(launcher, root, root, logs, a.per_side).spawn()
    cold = spawn_pair(launcher, side, side, logs, "cold")
    cold_t = {}
    for name in ("cand", "best"):
        w = cold.worker(name)
        w.handshake()
        hello = time.perf_counter() - t0
        tb = time.perf_counter()
        w.request("build", spec=spec)
        cold_t[name] = {"spawn_to_hello_s": hello, "build_s": time.perf_counter() - tb,
                        "ready_s": time.perf_counter() - t0, "prelude_s": w.prelude_s}
    forks.ready()
    result["cold"] = cold_t
    result["fork_servers_ready_s"] = forks.times()
    result["pool_ready_s"] = time.perf_counter() - t0
    print("cold", cold_t, "pool", result["pool_ready_s"], flush=True)
    cold.freeze()

    # 2. forked pairs, one core and two cores alternating
    result["forked"] = []
    for i in range(a.pairs):
        if time.perf_counter() - started > a.deadline_s - 20:
            result["stopped_early"] = f"deadline after {i} forked pairs"
            break
        cores = a.one if i % 4 in (0, 3) else a.two  # ABBA: each fork server serves both core settings
        tf = time.perf_counter()
        c, b = forks.fork_pair(f"p{i}")
        pair = Pair(c, b)
        for name in ("cand", "best"):
            w = pair.worker(name)
            w.handshake()
            tb = time.perf_counter()
            w.request("build", spec=spec)
            pair.build_s[name] = time.perf_counter() - tb
        ready = time.perf_counter() - tf
        forks.cand.note_ready(c)
        forks.best.note_ready(b)
        pair.pin(tuple(int(x) for x in cores.split(",")))
        seg = run_segment(pair, i, prompts, lane.batch, a.rounds, a.warmup, rng, watch=watch_for(pair, lane.is_cuda))
        d = segment_data(seg, pair, cores)
        d["pair_ready_s"] = ready
        d["zygote"] = i % a.per_side
        result["forked"].append(d)
        print("pair", i, cores, f"ready {ready:.2f} s", f"lr {d['mean_log_ratio']:+.4f}", flush=True)
        pair.close()

    # 3. the cold pair's segment
    cold.pin(tuple(int(x) for x in a.one.split(",")))
    seg = run_segment(cold, 0, prompts, lane.batch, a.rounds, a.warmup, rng, watch=watch_for(cold, lane.is_cuda))
    result["cold_segment"] = segment_data(seg, cold, a.one)
    cold.close()
    forks.close()
    for cores in (a.one, a.two):
        lrs = [d["mean_log_ratio"] for d in result["forked"] if d["cores"] == cores]
        within = [statistics.stdev(math.log(c / b) for c, b in zip(d["cand_s"], d["best_s"]))
                  for d in result["forked"] if d["cores"] == cores]
        result[f"spread_{cores}"] = {"pairs": len(lrs),
                                     "sd_mean_log_ratio": statistics.stdev(lrs) if len(lrs) > 1 else None,
                                     "per_round_sd": statistics.fmean(within) if within else None}
    result["wall_s"] = time.perf_counter() - started
    (a.out / "forkserver.json").write_text(json.dumps(result, indent=1, default=lambda o: asdict(o)))
    print(json.dumps({k: v for k, v in result.items() if k not in ("forked", "cold_segment")}, indent=1), flush=True)


if __name__ == "__main__":
    main()
