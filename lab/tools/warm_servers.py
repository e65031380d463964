"""A no-op DISCARD's phase record with the lane's `performance.warm_servers` off (the quality run's pair exec'd) and
on (forked from the fork servers the previous experiment or the baseline started), side by side in one run.

Two project copies of this tree (the embedded test model; the lane's shipped protocol unless --fast), one per arm,
each initialised and baselined; then `--runs` no-ops (a comment each) per arm, alternating. Before each run of the
"on" arm, and after it, the tool waits until that copy's warm servers have said hello, so that their imports never
run beside the other arm's experiment (and the time they took to be ready is recorded: in use, that is the time
between experiments). Prints a Markdown table and writes the raw records as JSON.

    python -m lab.tools.warm_servers --out /tmp/warm-servers.json [--fast] [--runs 3] [--lane embedded-cpu]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from lab.tools.fast_keeps import baselined_copy
from pytest_dit_ar.loop.speed import warm_servers
from pytest_dit_ar.state.paths import StatePaths
from pytest_dit_ar.state.phases import PhaseTimes
from tests.helpers.loop import commit_change, experiment, ledger_rows

ARMS = {"warm servers off": False, "warm servers on": True}


def project(dest: Path, lane: str, warm: bool, fast: bool) -> Path:
    """A baselined copy whose lane has `performance.warm_servers` = `warm` (else the shipped protocol, or the
    tests' short one)."""
    return baselined_copy(dest, lane, fast, {"warm_servers": warm})


def wait_ready(repo: Path, timeout_s: float = 600.0) -> float | None:
    """Seconds until the copy's warm servers said hello (None: none were started)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        rec = warm_servers.read(StatePaths(repo))
        if rec is None:
            return None
        if rec.servers:
            return time.perf_counter() - t0
        time.sleep(0.2)
    raise RuntimeError(f"the warm servers of {repo} were not ready in {timeout_s} s")


def judged(repo: Path, desc: str) -> dict:
    """Run the experiment of HEAD; its ledger status, wall time seen from outside, phase record and warm note."""
    t0 = time.perf_counter()
    experiment(repo, "exact", desc)
    outside = time.perf_counter() - t0
    row = ledger_rows(repo)[-1]
    data = json.loads((repo / row.run_dir / "experiment.json").read_text())
    return {"status": row.status.word, "estimate_pct": row.improvement_pct, "command_s": outside,
            "phases": data.get("phases"), "warm_servers": data.get("warm_servers"),
            "seconds": data.get("seconds")}


def table(results: dict[str, list[dict]]) -> list[str]:
    cols = [(arm, i) for i in range(max(len(v) for v in results.values())) for arm in results]
    lines = ["| phase (s) | " + " | ".join(f"{arm.split()[-1]} #{i + 1}" for arm, i in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for name in (*PhaseTimes.PHASES, "total"):
        cells = [f"{results[a][i]['phases'][name]:.1f}" for a, i in cols]
        lines.append(f"| {name.replace('_', ' ')} | " + " | ".join(cells) + " |")
    lines.append("| verdict | " + " | ".join(results[a][i]["status"] for a, i in cols) + " |")
    lines.append("| servers ready after (s) | " + " | ".join(
        f"{results[a][i]['ready_after_s']:.1f}" if results[a][i].get("ready_after_s") is not None else "-"
        for a, i in cols) + " |")
    lines.append("| command wall s | " + " | ".join(f"{results[a][i]['command_s']:.1f}" for a, i in cols) + " |")
    for arm, runs in results.items():
        lines.append(f"\n{arm}: start-up median {statistics.median(r['phases']['start_up'] for r in runs):.2f} s, "
                     f"total median {statistics.median(r['phases']['total'] for r in runs):.1f} s; notes: "
                     + "; ".join(sorted({str(r['warm_servers']) for r in runs})))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--lane", default="embedded-cpu")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--fast", action="store_true", help="the end-to-end tests' short protocol instead of the lane's")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="warm-servers-") as tmp:
        repos: dict[str, Path] = {}
        for arm, warm in ARMS.items():
            repos[arm] = project(Path(tmp) / arm.replace(" ", "-"), args.lane, warm, args.fast)
            wait_ready(repos[arm])
        results: dict[str, list[dict]] = {arm: [] for arm in ARMS}
        try:
            for i in range(args.runs):
                for arm, repo in repos.items():
                    commit_change(repo, "model_under_test/__init__.py", f"\n# comment {i}: nothing changes\n",
                                  f"no-op {i}")
                    result = judged(repo, f"no-op {i}")
                    result["ready_after_s"] = wait_ready(repo)  # the next one's, before anything else runs
                    results[arm].append(result)
        finally:
            for repo in repos.values():
                warm_servers.stop(StatePaths(repo))
    args.out.write_text(json.dumps(results, indent=1))
    print("\n".join(table(results)))


if __name__ == "__main__":
    main()
