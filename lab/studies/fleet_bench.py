"""Fleet throughput and Ray's overhead per judged experiment, on a local Ray cluster with stand-in judges.

N sessions (worktrees of one project copy, each its own driver process, as agents run them) judge experiments back
to back, each on its own slot of one fake GPU; a judge holds its slot for `--judge-s` seconds by *sleeping* (not
spinning: on a 2-core machine a spinning stand-in would measure CPU contention, not scheduling), then hands back a
discard the driver records. Everything around the sleep is the product's: the payload (git bundle), the dispatch
record, the judge actor in its placement group, its replies, the archive, the ledger row, the reset.

For each N it reports experiments per hour (all sessions) and the ratio to N times one session's, and per judged
experiment where the time beyond the judge's sleep went: in Ray calls (actor creation, prepare, start, the waits
less the sleep, output, archive, release) and in the harness's own work (payload, records, git).

    python -m lab.studies.fleet_bench --sessions 1,2,4 --experiments 6 --judge-s 10

Run it from the repository root (the judges import this module from there).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dit_ar_contract.device import DeviceIdentity, LaneTarget
from lab.studies.fleet_stand_in import LANE, SleepingJudge
from pytest_dit_ar.fleet.request import JudgeRequest
from pytest_dit_ar.state.best import Measurements

ROOT = Path(__file__).resolve().parents[2]


class TimedExecutor:
    """The Ray executor, with the time spent inside its calls added up (what the driver waits on Ray for)."""

    def __init__(self, inner):  # noqa: ANN001 - a RayExecutor
        self.inner, self.spent, self.calls = inner, 0.0, {}

    def _timed(self, name: str, fn, *args):  # noqa: ANN001, ANN202
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            took = time.perf_counter() - t
            self.spent += took
            self.calls[name] = self.calls.get(name, 0.0) + took

    def judge(self, request: JudgeRequest):  # noqa: ANN201
        judge = self._timed("judge", self.inner.judge, request)
        executor = self

        class Timed:
            name = judge.name

            def __getattr__(self, method: str):  # noqa: ANN204
                return lambda *args: executor._timed(method, getattr(judge, method), *args)

        return Timed()

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.inner, name)


def drive(tree: Path, address: str, experiments: int, judge_s: float, out: Path) -> None:
    """One session's driver process: `experiments` candidates judged back to back; timings to `out` (JSON)."""
    from pytest_dit_ar.fleet.driver import Driver
    from pytest_dit_ar.fleet.ray_executor import RayExecutor

    executor = TimedExecutor(RayExecutor(address, work=SleepingJudge(judge_s), out=lambda _: None))
    rows, start = [], time.time()
    for i in range(experiments):
        init = tree / "model_under_test" / "__init__.py"
        init.write_text(init.read_text() + f"\n_IDEA = \"{tree.name} idea {i}\"\n")  # code, not a comment
        _git(tree, "commit", "-qam", f"idea {i}")
        before, t, executor.calls = executor.spent, time.perf_counter(), {}
        code = Driver(tree / "config" / "autoresearch.json", executor, out=lambda _: None,
                      echo=None).experiment("exact", f"idea {i}")
        total = time.perf_counter() - t
        ray_s = executor.spent - before - judge_s
        calls = {**executor.calls, "result": executor.calls.get("result", 0.0) - judge_s}  # the waits less the sleep
        rows.append({"code": code, "total_s": total, "ray_s": ray_s, "harness_s": total - judge_s - ray_s,
                     "calls": calls})
    out.write_text(json.dumps({"start": start, "end": time.time(), "rows": rows}))


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=tree, check=True, capture_output=True, text=True).stdout.strip()


def sessions(base: Path, count: int, address: str, prefix: str) -> list[Path]:
    """`count` worktrees of one project copy, each a session bound to a slot of its own (one fake GPU)."""
    from pytest_dit_ar.fleet import ray_executor
    from pytest_dit_ar.loop.init_session import init
    from pytest_dit_ar.state import gitops, records
    from pytest_dit_ar.state.executor import ExecutorChoice
    from pytest_dit_ar.state.session import open_session

    repo = base / "repo"
    if not repo.exists():
        from tests.helpers.loop import make_project_copy

        make_project_copy(repo)
        _git(repo, "gc", "-q")  # packed, as a cloned repository is (a bundle of loose objects costs 0.3 s more)
    trees = []
    for i in range(count):
        slot, tag = f"{prefix}:slot-{i}", f"{prefix}-{i:02d}"
        ray_executor.create_slot(slot, 1, 1.0)
        tree = base / f"repo-{tag}"
        _git(repo, "worktree", "add", "--detach", str(tree), "HEAD")
        target = LaneTarget(LANE, LANE, "cuda:0", DeviceIdentity("cuda", "Fake GPU", f"GPU-fake-{tag}"), False)
        init(tree / "config" / "autoresearch.json", tag, LANE, out=lambda _: None, target=target,
             executor=ExecutorChoice("ray", address, slot, prefix))
        session = open_session(tree / "config" / "autoresearch.json")
        records.set_best(session, gitops.open_repo(tree), _git(tree, "rev-parse", "HEAD"), "bench", Measurements())
        trees.append(tree)
    return trees


def measure(base: Path, count: int, address: str, experiments: int, judge_s: float) -> dict:
    from pytest_dit_ar.fleet import ray_executor

    prefix = f"bench{count}"
    trees = sessions(base, count, address, prefix)
    outs = [base / f"{prefix}-{i}.json" for i in range(count)]
    started = time.time()
    procs = [subprocess.Popen([sys.executable, "-m", "lab.studies.fleet_bench", "--drive", str(t), "--address",
                               address, "--experiments", str(experiments), "--judge-s", str(judge_s), "--out", str(o)],
                              cwd=ROOT) for t, o in zip(trees, outs)]
    if any(p.wait() for p in procs):
        raise SystemExit("a driver failed")
    wall = time.time() - started
    for i in range(count):
        ray_executor.remove_slot(f"{prefix}:slot-{i}")
    runs = [json.loads(o.read_text()) for o in outs]
    rows = [r for run in runs for r in run["rows"]]
    assert all(r["code"] == 1 for r in rows), rows
    # experiments per hour over the window where every session was judging (first start to last end)
    window = max(r["end"] for r in runs) - min(r["start"] for r in runs)
    return {"sessions": count, "experiments": len(rows), "wall_s": wall, "window_s": window,
            "per_hour": 3600 * len(rows) / window,
            "ray_s": statistics.median(r["ray_s"] for r in rows), "ray_max_s": max(r["ray_s"] for r in rows),
            "harness_s": statistics.median(r["harness_s"] for r in rows),
            "calls": {name: statistics.median(r["calls"].get(name, 0.0) for r in rows)
                      for name in sorted({n for r in rows for n in r["calls"]})}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="1,2,4")
    parser.add_argument("--experiments", type=int, default=6)
    parser.add_argument("--judge-s", type=float, default=10.0)
    parser.add_argument("--drive", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        drive(args.drive, args.address, args.experiments, args.judge_s, args.out)
        return
    import ray
    from ray.cluster_utils import Cluster

    from pytest_dit_ar.fleet import ray_executor

    counts = [int(n) for n in args.sessions.split(",")]
    os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "num_gpus": 0, "include_dashboard": False})
    for _ in range(max(1, (max(counts) + 1) // 2)):
        cluster.add_node(num_cpus=4, num_gpus=2)
    cluster.wait_for_nodes()
    ray_executor.connect(cluster.address)
    base = Path(tempfile.mkdtemp(prefix="dit-ar-fleet-bench-"))
    print(f"ray {ray.__version__}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; judge sleeps "
          f"{args.judge_s:g} s; {args.experiments} experiments a session, back to back")
    results = []
    try:
        for count in counts:
            result = measure(base, count, cluster.address, args.experiments, args.judge_s)
            results.append(result)
            one = results[0]["per_hour"] / results[0]["sessions"]
            print(f"N={count}: {result['experiments']} experiments in {result['window_s']:.1f} s = "
                  f"{result['per_hour']:.0f}/h ({result['per_hour'] / (count * one):.3f} x N times one session's); "
                  f"per experiment beyond the judge's {args.judge_s:g} s: Ray {result['ray_s']:.2f} s median "
                  f"(max {result['ray_max_s']:.2f} s), harness {result['harness_s']:.2f} s median", flush=True)
            print("  Ray calls, median s per experiment: " + ", ".join(f"{name} {s:.2f}" for name, s in
                                                                      result["calls"].items()), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
