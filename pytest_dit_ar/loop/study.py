"""Measure the performance verdict itself: false keeps on no-op commits, detection of true speedups.

Each simulated experiment runs the harness's own protocol (perf_suite.timing: fresh worker processes,
interleaved paired rounds, fresh seeds, the keep rule, a confirming block in new processes) on two
copies of the working tree. A no-op experiment compares the tree with itself; a speedup experiment
compares the tree with a copy whose generate() first sleeps for a set fraction of the measured
latency, so the candidate is truly faster by that fraction. The same blocks are also judged by the
naive protocol (one median of the candidate against a stored best median, keep if 0.5% faster).

    python -m pytest_dit_ar.loop.study --config config/autoresearch.json --lane dit-xl2-256 \
        --nulls 20 --speedups 2,5,10 --trials 5 --out study.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dit_ar_contract import device
from dit_ar_contract.config import PerfProtocol, load_config
from dit_ar_contract.errors import CandidateCrash
from perf_suite.stats import decide_block
from quality_suite.corpora import load_corpus

from ..worker.client import WorkerLauncher
from .measurement import Pair, Side, boot, run_block

SLEEP_WRAPPER = '''

import time as _study_time
_STUDY_DELAY_S = {delay}
_study_build = build_pipeline


def build_pipeline(spec):
    pipe = _study_build(spec)
    _gen = pipe.generate

    def generate(requests):
        _study_time.sleep(_STUDY_DELAY_S)
        return _gen(requests)

    pipe.generate = generate
    return pipe
'''
NAIVE_THRESHOLD = 0.005


def slowed_copy(root: Path, dest: Path, delay_s: float) -> Path:
    """A copy of model_under_test whose generate() first sleeps delay_s (the 'best' of a speedup trial)."""
    shutil.copytree(root / "model_under_test", dest / "model_under_test",
                    ignore=shutil.ignore_patterns("__pycache__"))
    init = dest / "model_under_test" / "__init__.py"
    init.write_text(init.read_text() + SLEEP_WRAPPER.format(delay=delay_s))
    return dest


class PairPool:
    """Worker pairs started `size` at a time and used once each, so that every block runs in fresh
    processes while process start-up (which loads the host) never overlaps a timed block."""

    def __init__(self, cand: Side, best: Side, launcher: WorkerLauncher, log_dir: Path, size: int,
                 affinity: tuple[int, ...] | None = None):
        self.cand, self.best, self.launcher = cand, best, launcher
        self.affinity = affinity
        self.log_dir, self.size = log_dir, size
        self.ready: list[Pair] = []
        self.started = 0

    def take(self) -> Pair:
        if not self.ready:
            self._fill()
        return self.ready.pop()

    def _fill(self) -> None:
        workers = []
        for _ in range(self.size):
            n = self.started = self.started + 1
            logs = (self.log_dir / f"cand-{self.cand.name}-{n}.log", self.log_dir / f"best-{self.best.name}-{n}.log")
            workers.append((self.launcher.worker("candidate", self.cand.root, logs[0]).spawn(),
                            self.launcher.worker("best", self.best.root, logs[1]).spawn()))

        with ThreadPoolExecutor(2 * self.size) as pool:
            futures = [(pool.submit(boot, c, self.cand.spec), pool.submit(boot, b, self.best.spec)) for c, b in workers]
            for (c, b), (fc, fb) in zip(workers, futures):
                try:
                    pair = Pair(c, b, {"cand": fc.result(), "best": fb.result()})
                    pair.pin(self.affinity)
                    self.ready.append(pair)
                except CandidateCrash:
                    c.kill()
                    b.kill()
                    raise

    def close(self) -> None:
        for pair in self.ready:
            pair.close()
        self.ready = []


def one_experiment(make_pair, perf: PerfProtocol, prompts: tuple[str, ...], batch: int, metric: str,
                   rng: random.Random) -> dict[str, Any]:
    """The keep rule of perf_suite.timing.measure: block 1, then a confirming block in fresh workers."""
    blocks = []
    for index in range(2):
        pair: Pair = make_pair()
        try:
            block = run_block(pair, index, prompts, batch, perf.rounds, perf.warmup_rounds, rng)
        finally:
            pair.close()
        block.stats = decide_block(block.cand_s, block.best_s, metric=metric,
                                   min_improvement_pct=perf.min_improvement_pct, alpha=perf.alpha,
                                   resamples=perf.bootstrap_resamples)
        blocks.append(block)
        if not block.stats.passes or block.problems:
            break
    keep = len(blocks) == 2 and all(b.stats.passes and not b.problems for b in blocks)
    return {"keep": keep, "blocks": [b.stats.as_dict() for b in blocks],
            "first_block_cand_median_ms": blocks[0].stats.cand_median_ms,
            "first_block_best_median_ms": blocks[0].stats.best_median_ms,
            "problems": [p for b in blocks for p in b.problems]}


def run_study(config_path: Path, lane_name: str, nulls: int, speedups: list[float], trials: int,
              steps: int | None, rounds: int | None, pool_size: int = 4, affinity: tuple[int, ...] | None = None,
              out: Path | None = None) -> dict[str, Any]:
    config = load_config(config_path)
    lane = config.lane(lane_name)
    target = device.resolve_lane(config, lane)
    if not target.runnable:
        raise SystemExit(f"lane {lane_name} cannot run here: {target.problem}")
    perf = dataclasses.replace(lane.performance, rounds=rounds or lane.performance.rounds,
                               cpu_affinity=affinity or lane.performance.cpu_affinity)
    launcher = WorkerLauncher(target, perf.threads, perf.round_timeout_s)
    root = config.root
    prompts = tuple(c.prompt for c in load_corpus(root / lane.corpus))
    metric = lane.primary_metric
    rng = random.SystemRandom()
    tmp = Path(tempfile.mkdtemp(prefix="dit-ar-study-"))
    logs = tmp / "logs"

    def spec_for(side_root: Path) -> dict[str, Any]:
        spec = lane.workload(side_root)
        if steps:
            spec["steps"] = steps
        return spec

    pools: list[PairPool] = []

    def pair_factory(cand_root: Path, best_root: Path, tag: str):
        pool = PairPool(Side(tag, cand_root, spec_for(cand_root)), Side(tag, best_root, spec_for(best_root)),
                        launcher, logs, pool_size, perf.cpu_affinity)
        pools.append(pool)
        return pool.take

    started = time.perf_counter()
    null_factory = pair_factory(root, root, "null")
    # The stored best for the naive protocol: one measurement of the unchanged tree, taken once.
    stored = one_experiment(null_factory, dataclasses.replace(perf, min_improvement_pct=1e9), prompts,
                            lane.batch, metric, rng)
    stored_best_ms = stored["first_block_best_median_ms"]
    results: dict[str, Any] = {"lane": lane_name, "lane_id": target.lane_id, "device": target.identity.as_dict(),
                               "steps": steps or lane.steps, "batch": lane.batch, "perf": dataclasses.asdict(perf),
                               "stored_best_ms": stored_best_ms, "null": [], "speedup": {}}
    for i in range(nulls):
        r = one_experiment(null_factory, perf, prompts, lane.batch, metric, rng)
        r["naive_keep"] = r["first_block_cand_median_ms"] < stored_best_ms * (1 - NAIVE_THRESHOLD)
        results["null"].append(r)
        _save(results, out, started)
        print(f"null {i + 1}/{nulls}: keep={r['keep']} naive_keep={r['naive_keep']} "
              f"ratio={r['blocks'][0]['median_ratio']:.4f} p={r['blocks'][0]['p_value']:.3g}", flush=True)
    for pct in speedups:
        delay_s = stored_best_ms / 1e3 * (pct / 100) / (1 - pct / 100)
        slow_root = slowed_copy(root, tmp / f"slow{pct:g}", delay_s)
        rows: list[dict[str, Any]] = []
        results["speedup"][f"{pct:g}"] = {"delay_s": delay_s, "trials": rows}
        factory = pair_factory(root, slow_root, f"s{pct:g}")
        for t in range(trials):
            r = one_experiment(factory, perf, prompts, lane.batch, metric, rng)
            r["naive_keep"] = r["first_block_cand_median_ms"] < r["first_block_best_median_ms"] * (1 - NAIVE_THRESHOLD)
            rows.append(r)
            _save(results, out, started)
            print(f"speedup {pct:g}% trial {t + 1}/{trials}: keep={r['keep']} "
                  f"measured={r['blocks'][0]['improvement_pct']:+.2f}%", flush=True)
    for pool in pools:
        pool.close()
    shutil.rmtree(tmp, ignore_errors=True)
    _save(results, out, started)
    return results


def _save(results: dict[str, Any], out: Path | None, started: float) -> None:
    """Update the summary and wall time; write what is known so far (a run cut short still leaves its data)."""
    results["summary"] = summarize(results)
    results["wall_s"] = time.perf_counter() - started
    if out is not None:
        out.write_text(json.dumps(results, indent=1, default=str))


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    nulls = results["null"]
    out: dict[str, Any] = {
        "null_experiments": len(nulls),
        "false_keeps": sum(r["keep"] for r in nulls),
        "naive_false_keeps": sum(r["naive_keep"] for r in nulls),
    }
    for pct, block in results["speedup"].items():
        trials = block["trials"]
        out[f"detected_{pct}pct"] = f"{sum(r['keep'] for r in trials)}/{len(trials)}"
        out[f"naive_detected_{pct}pct"] = f"{sum(r['naive_keep'] for r in trials)}/{len(trials)}"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_dit_ar.loop.study", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("config/autoresearch.json"))
    parser.add_argument("--lane", required=True)
    parser.add_argument("--nulls", type=int, default=20)
    parser.add_argument("--speedups", default="2,5,10", help="true speedups to inject, in percent")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--steps", type=int, default=None, help="override the lane's sampling steps")
    parser.add_argument("--rounds", type=int, default=None, help="override the lane's timed rounds per block")
    parser.add_argument("--pool", type=int, default=4, help="worker pairs started at once (outside timed blocks)")
    parser.add_argument("--cpu-affinity", default=None, help="comma-separated cores for both sides' workers")
    parser.add_argument("--out", type=Path, default=Path("study.json"))
    args = parser.parse_args(argv)
    speedups = [float(s) for s in args.speedups.split(",") if s.strip()]
    cores = tuple(int(c) for c in args.cpu_affinity.split(",")) if args.cpu_affinity else None
    results = run_study(args.config, args.lane, args.nulls, speedups, args.trials, args.steps, args.rounds,
                        args.pool, cores, args.out)
    print(json.dumps(results["summary"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
