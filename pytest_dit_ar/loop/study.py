"""Measure the performance verdict itself: false keeps on no-op commits and detection of true speedups,
for the sequential protocol and the earlier two-block protocol, side by side on the same measurements.

Collection. Segments are measured exactly as an experiment measures them (loop.measurement): a fresh
pair of worker processes, warm-up rounds, then paired rounds with fresh seeds in random order. A no-op
segment times the working tree against itself; a speedup segment times it against a copy whose
`generate()` first sleeps a set fraction of the measured latency, so the tree is truly faster by that
fraction. Arms are measured round-robin (a segment of each in turn), so a change in the machine's load
reaches all of them. Pairs are started `--pool` at a time outside any timed round and every pair is
closed after its segment, so memory stays bounded. `--load N` runs N busy processes beside the workers
for the whole collection (a competing CPU load).

Evaluation. Each arm's segments are consumed in order by repeated experiments: the sequential test
(perf_suite.sequential) takes segments until it decides, using the first `rounds` rounds of each; the
earlier protocol judges one segment as a block of its own shipped length (`--old-rounds`, paired Wilcoxon
+ bootstrap, perf_suite.stats) and, if it passes, the next segment as the confirming block. So both
protocols are judged on the same processes in the same time window; segments are measured with the
longer of the two lengths. Experiments never share segments, so they are independent.

    python -m pytest_dit_ar.loop.study --lane embedded-cpu --null-segments 40 --speedups 20 \\
        --segments-per-speedup 40 --load 1 --out study.json --figure study.png
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import random
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import t as student

from dit_ar_contract import device
from dit_ar_contract.config import PerfProtocol, load_config
from perf_suite.sequential import (
    Design,
    OffsetBound,
    PairSpread,
    SequentialTest,
    improvement_pct,
    look_stats,
    pooled_bound,
    trimmed,
)
from perf_suite.stats import decide_block
from quality_suite.corpora import load_corpus

from ..worker.client import SandboxPolicy, WorkerLauncher
from .measurement import Pair, Side, boot, run_segment
from .patching import SLEEP_WRAPPER

OLD_BLOCKS = 2  # the earlier protocol: a block, then a confirming block in fresh workers


def slowed_copy(root: Path, dest: Path, delay_s: float) -> Path:
    """A copy of model_under_test whose generate() first sleeps delay_s (the 'best' of a speedup arm)."""
    shutil.copytree(root / "model_under_test", dest / "model_under_test", ignore=shutil.ignore_patterns("__pycache__"))
    init = dest / "model_under_test" / "__init__.py"
    init.write_text(init.read_text() + SLEEP_WRAPPER.format(delay=delay_s))
    return dest


def _spin() -> None:  # pragma: no cover - runs in the load processes
    while True:
        pass


# -- evaluation (pure) ---------------------------------------------------------------------------
def new_protocol(segments: list[dict[str, Any]], design: Design, rounds: int,
                 bound: OffsetBound | None = None) -> list[dict[str, Any]]:
    """Consecutive experiments of the sequential protocol over one arm's segments (first `rounds` of each)."""
    bound = bound or OffsetBound.default("cuda")
    out, test = [], SequentialTest(design, bound)
    for seg in segments:
        look = test.add(seg["cand_s"][:rounds], seg["best_s"][:rounds])
        if look.final:
            out.append({"keep": look.decision == "keep", "decision": look.decision, "segments": look.segments,
                        "rounds": look.rounds, "estimate_pct": look.estimate_pct})
            test = SequentialTest(design, bound)
    return out


def aa_spread(segments: list[dict[str, Any]], rounds: int | None = None) -> PairSpread | None:
    """The between-pair spread of A/A segments (both sides the same code): what a calibration measures."""
    if len(segments) < 2:
        return None
    r = np.array([np.log(np.asarray(s["cand_s"][:rounds]) / np.asarray(s["best_s"][:rounds])) for s in segments])
    loc, var, _ = trimmed(r[None])
    return PairSpread(len(segments), float(loc.var(1, ddof=1)[0]), float(var.mean(1)[0]))


def old_protocol(segments: list[dict[str, Any]], protocol: PerfProtocol, metric: str,
                 rounds: int) -> list[dict[str, Any]]:
    """Consecutive experiments of the earlier protocol: a block, and a confirming block if it passes."""
    out, passed = [], []
    for seg in segments:
        stats = decide_block(seg["cand_s"][:rounds], seg["best_s"][:rounds], metric=metric,
                             min_improvement_pct=protocol.min_improvement_pct, alpha=protocol.alpha, resamples=2000)
        passed.append(stats)
        if not stats.passes or len(passed) == OLD_BLOCKS:
            out.append({"keep": all(s.passes for s in passed), "segments": len(passed),
                        "rounds": sum(s.rounds for s in passed), "estimate_pct": passed[0].improvement_pct})
            passed = []
    return out


def resampled(segments: list[dict[str, Any]], design: Design, rounds: int, orders: int = 2000,
              seed: int = 0) -> dict[str, Any] | None:
    """One sequential experiment from the start of each of `orders` random orderings of the segments: a
    resampling estimate of the keep rate (experiments share segments, so they are not independent)."""
    if len(segments) < design.max_segments:
        return None
    rng = np.random.default_rng(seed)
    kept, used = 0, []
    for _ in range(orders):
        test = SequentialTest(design, OffsetBound.default("cuda"))
        for i in rng.permutation(len(segments)):
            look = test.add(segments[i]["cand_s"][:rounds], segments[i]["best_s"][:rounds])
            if look.final:
                kept += look.decision == "keep"
                used.append(look.segments)
                break
    return {"orders": orders, "keep_rate": kept / orders, "mean_segments": float(np.mean(used))}


def pooled(segments: list[dict[str, Any]], design: Design, rounds: int) -> dict[str, float] | None:
    """All of an arm's segments as one estimate: improvement of the candidate side and its 1 - alpha interval."""
    if len(segments) < 2:
        return None
    r = np.array([np.log(np.asarray(s["cand_s"][:rounds]) / np.asarray(s["best_s"][:rounds])) for s in segments])
    st = look_stats(r[None], OffsetBound.default("cuda").sd)
    est, se, df = float(st.estimate[0]), float(st.se[0]), float(st.df[0])
    q = float(student.ppf(1 - design.alpha, df))
    lo, hi = sorted((improvement_pct(est + q * se, design.metric), improvement_pct(est - q * se, design.metric)))
    return {"estimate_pct": improvement_pct(est, design.metric), "lower_pct": lo, "upper_pct": hi,
            "segments": len(segments)}


def summarize(arms: dict[str, list[dict[str, Any]]], protocol: PerfProtocol, metric: str,
              old_rounds: int, orders: int = 2000) -> dict[str, Any]:
    design = dataclasses.replace(Design.from_protocol(protocol, metric), pairs=1)  # the study times segments
    out = {}
    for arm, segments in arms.items():
        row = {"segments": len(segments)}
        runs_of = {"new": new_protocol(segments, design, protocol.rounds),
                   "old": old_protocol(segments, protocol, metric, old_rounds)}
        for name, runs in runs_of.items():
            row[name] = {"experiments": len(runs), "keeps": sum(r["keep"] for r in runs),
                         "keep_rate": sum(r["keep"] for r in runs) / len(runs) if runs else None,
                         "mean_rounds": float(np.mean([r["rounds"] for r in runs])) if runs else None,
                         "decisions": [r.get("decision", "keep" if r["keep"] else "discard") for r in runs]}
        medians = [float(np.median(np.log(np.asarray(s["cand_s"]) / np.asarray(s["best_s"])))) for s in segments]
        row["segment_median_log_ratio_sd"] = float(np.std(medians, ddof=1)) if len(medians) > 1 else None
        spread = aa_spread(segments, protocol.rounds)
        row["segment_trimmed_mean_sd_pct"] = 100 * float(np.sqrt(spread.spread_var)) if spread else None
        if arm == "null" and spread is not None:
            prior = OffsetBound.default("cuda")
            row["offset_bound_pct"] = pooled_bound(prior, [spread], protocol.bound_confidence, 1).pct
        row["new"]["resampled"] = resampled(segments, design, protocol.rounds, orders)
        row["pooled"] = pooled(segments, design, protocol.rounds)
        out[arm] = row
    return out


def figure(summary: dict[str, Any], path: Path) -> Path:
    """Detection rate and rounds used against the true speedup, both protocols."""
    from matplotlib.figure import Figure

    arms = sorted((float(a), v) for a, v in summary.items() if a.replace(".", "", 1).isdigit())
    fig = Figure(figsize=(9, 3.6))
    left, right = fig.subplots(1, 2)
    for name, style in (("new", "o-"), ("old", "s--")):
        xs = [x for x, v in arms if v[name]["experiments"]]
        left.plot(xs, [100 * v[name]["keep_rate"] for x, v in arms if v[name]["experiments"]], style,
                  label=f"{name} protocol")
        right.plot(xs, [v[name]["mean_rounds"] for x, v in arms if v[name]["experiments"]], style,
                   label=f"{name} protocol")
    null = summary.get("null")
    if null:
        for name, colour in (("new", "C0"), ("old", "C1")):
            if null[name]["experiments"]:
                left.axhline(100 * null[name]["keep_rate"], color=colour, lw=0.8, ls=":",
                             label=f"{name}: no-ops kept {null[name]['keeps']}/{null[name]['experiments']}")
    left.set(xlabel="true speedup (%)", ylabel="kept (%)", title="detection", ylim=(-5, 105))
    right.set(xlabel="true speedup (%)", ylabel="paired rounds per decision", title="cost")
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


# -- collection -----------------------------------------------------------------------------------
class PairPool:
    """Worker pairs started `size` at a time (outside timed rounds) and used for one segment each."""

    def __init__(self, cand: Side, best: Side, launcher: WorkerLauncher, log_dir: Path, size: int,
                 affinity: tuple[int, ...] | None = None, best_launcher: WorkerLauncher | None = None):
        self.cand, self.best, self.launcher = cand, best, launcher
        self.best_launcher = best_launcher or launcher  # another kind of worker for the best side (overhead arm)
        self.affinity, self.log_dir, self.size = affinity, log_dir, size
        self.ready: list[Pair] = []
        self.started = 0

    def take(self) -> Pair:
        if not self.ready:
            self._fill()
        return self.ready.pop()

    def _fill(self) -> None:
        pairs = []
        for _ in range(self.size):
            self.started += 1
            n = self.started
            logs = (self.log_dir / f"cand-{self.cand.name}-{n}.log", self.log_dir / f"best-{self.best.name}-{n}.log")
            pairs.append(Pair(self.launcher.worker("candidate", self.cand.root, logs[0]).spawn(),
                              self.best_launcher.worker("best", self.best.root, logs[1]).spawn()))
        with ThreadPoolExecutor(2 * self.size) as pool:
            futures = [(pool.submit(boot, p.cand, self.cand.spec), pool.submit(boot, p.best, self.best.spec))
                       for p in pairs]
            try:
                for p, (fc, fb) in zip(pairs, futures):
                    p.build_s = {"cand": fc.result(), "best": fb.result()}
                    p.pin(self.affinity)
            except BaseException:
                for p in pairs:
                    p.kill()
                raise
        self.ready.extend(pairs)

    def close(self) -> None:
        for pair in self.ready:
            pair.close()
        self.ready = []


def run_study(config_path: Path, lane_name: str, null_segments: int, speedups: list[float],
              segments_per_speedup: int, steps: int | None, rounds: int | None, old_rounds: int, pool_size: int,
              load: int, affinity: tuple[int, ...] | None, deadline_s: float | None,
              out: Path | None, sandboxed: bool = True, overhead_segments: int = 0, tree: Path | None = None,
              quiet: bool = False) -> dict[str, Any]:
    """Collect the arms (see the module docstring); `tree`: the folder whose model_under_test is timed (default
    the project root; `dit-ar calibrate` passes the best worktree)."""
    config = load_config(config_path)
    lane = config.lane(lane_name)
    target = device.resolve_lane(config, lane)
    if not target.runnable:
        raise SystemExit(f"lane {lane_name} cannot run here: {target.problem}")
    protocol = dataclasses.replace(lane.performance, rounds=rounds or lane.performance.rounds,
                                   cpu_affinity=affinity or lane.performance.cpu_affinity)
    policy = SandboxPolicy((), lane.is_cuda) if sandboxed else None
    launcher = WorkerLauncher(target, protocol.threads, protocol.round_timeout_s, policy)
    project = config.root
    root = tree or project
    prompts = tuple(c.prompt for c in load_corpus(project / lane.corpus))
    tmp = Path(tempfile.mkdtemp(prefix="dit-ar-study-"))
    started = time.perf_counter()
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(load)]
    for s in spinners:
        s.start()

    def spec_for(side_root: Path) -> dict[str, Any]:
        spec = lane.workload(launcher.model_root(side_root), project)
        return {**spec, "steps": steps} if steps else spec

    def pool(cand_root: Path, best_root: Path, tag: str, best_launcher: WorkerLauncher | None = None) -> PairPool:
        best_spec = lane.workload((best_launcher or launcher).model_root(best_root), project)
        best_spec = {**best_spec, "steps": steps} if steps else best_spec
        return PairPool(Side(tag, cand_root, spec_for(cand_root)), Side(tag, best_root, best_spec),
                        launcher, tmp / "logs", pool_size, protocol.cpu_affinity, best_launcher)

    rng = random.SystemRandom()
    measured = max(protocol.rounds, old_rounds)
    results: dict[str, Any] = {"lane": lane_name, "lane_id": target.lane_id, "device": target.identity.as_dict(),
                               "steps": steps or lane.steps, "batch": lane.batch, "load": load,
                               "protocol": dataclasses.asdict(protocol), "old_rounds": old_rounds,
                               "sandboxed": sandboxed,
                               "arms": {}, "delays_s": {}}
    pools = {"null": pool(root, root, "null")}
    try:
        first = run_segment(pools["null"].take(), 0, prompts, lane.batch, measured, protocol.warmup_rounds, rng,
                            resolution=lane.resolution)
        latency_s = float(np.median(first.best_s))
        results["arms"]["null"] = [_segment_data(first)]
        for pct in speedups:
            delay = latency_s * (pct / 100) / (1 - pct / 100)
            results["delays_s"][f"{pct:g}"] = delay
            pools[f"{pct:g}"] = pool(root, slowed_copy(root, tmp / f"slow{pct:g}", delay), f"s{pct:g}")
            results["arms"][f"{pct:g}"] = []
        wanted = {"null": null_segments, **{f"{p:g}": segments_per_speedup for p in speedups}}
        if overhead_segments and policy is not None:  # the sandboxed tree against the same tree unsandboxed
            plain = WorkerLauncher(target, protocol.threads, protocol.round_timeout_s)
            pools["sandbox-overhead"] = pool(root, root, "overhead", plain)
            results["arms"]["sandbox-overhead"] = []
            wanted["sandbox-overhead"] = overhead_segments
        while any(len(results["arms"][a]) < n for a, n in wanted.items()):
            # the arm furthest behind its quota next, so a deadline leaves the arms in proportion
            arm = min((a for a, n in wanted.items() if len(results["arms"][a]) < n),
                      key=lambda a: len(results["arms"][a]) / wanted[a])
            if deadline_s and time.perf_counter() - started > deadline_s:
                raise TimeoutError
            pair = pools[arm].take()
            try:
                seg = run_segment(pair, len(results["arms"][arm]), prompts, lane.batch, measured,
                                  protocol.warmup_rounds, rng, resolution=lane.resolution)
            finally:
                pair.close()
            results["arms"][arm].append(_segment_data(seg))
            _save(results, protocol, lane.primary_metric, old_rounds, out, started)
            if not quiet:
                print(" ".join(f"{a}:{len(s)}" for a, s in results["arms"].items()), flush=True)
    except TimeoutError:
        results["stopped"] = f"deadline of {deadline_s:.0f} s reached"
    finally:
        for p in pools.values():
            p.close()
        for s in spinners:
            s.terminate()
        shutil.rmtree(tmp, ignore_errors=True)
    _save(results, protocol, lane.primary_metric, old_rounds, out, started)
    return results


def _segment_data(seg: Any) -> dict[str, Any]:
    return {"cand_s": seg.cand_s, "best_s": seg.best_s, "warmup_s": seg.warmup_s, "build_s": seg.build_s,
            "orders": seg.orders, "problems": seg.unfaithful}


def _save(results: dict[str, Any], protocol: PerfProtocol, metric: str, old_rounds: int, out: Path | None,
          started: float) -> None:
    """Update the summary and wall time; write what is known so far (a run cut short still leaves its data)."""
    results["summary"] = summarize(results["arms"], protocol, metric, old_rounds)
    results["wall_s"] = time.perf_counter() - started
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_dit_ar.loop.study", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("config/autoresearch.json"))
    parser.add_argument("--lane", required=True)
    parser.add_argument("--null-segments", type=int, default=40)
    parser.add_argument("--speedups", default="3,5,10", help="true speedups to inject, in percent")
    parser.add_argument("--segments-per-speedup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=None, help="override the lane's sampling steps")
    parser.add_argument("--rounds", type=int, default=None, help="override the rounds per segment")
    parser.add_argument("--old-rounds", type=int, default=12,
                        help="rounds per block of the earlier protocol (it shipped 12 on CPU, 16 on the GPU lanes)")
    parser.add_argument("--pool", type=int, default=2, help="worker pairs started at once (outside timed rounds)")
    parser.add_argument("--load", type=int, default=0, help="busy processes running beside the workers")
    parser.add_argument("--cpu-affinity", default=None, help="comma-separated cores for both sides' workers")
    parser.add_argument("--deadline-s", type=float, default=None, help="stop collecting after this many seconds")
    parser.add_argument("--unsandboxed", action="store_true", help="workers without the bubblewrap sandbox")
    parser.add_argument("--overhead-segments", type=int, default=0,
                        help="segments of the sandboxed tree against itself unsandboxed (the sandbox's overhead)")
    parser.add_argument("--out", type=Path, default=Path("study.json"))
    parser.add_argument("--figure", type=Path, default=None, help="write the detection/rounds figure here")
    args = parser.parse_args(argv)
    speedups = [float(s) for s in args.speedups.split(",") if s.strip()]
    cores = tuple(int(c) for c in args.cpu_affinity.split(",")) if args.cpu_affinity else None
    results = run_study(args.config, args.lane, args.null_segments, speedups, args.segments_per_speedup, args.steps,
                        args.rounds, args.old_rounds, args.pool, args.load, cores, args.deadline_s, args.out,
                        sandboxed=not args.unsandboxed, overhead_segments=args.overhead_segments)
    if args.figure:
        figure(results["summary"], args.figure)
    print(json.dumps(results["summary"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
