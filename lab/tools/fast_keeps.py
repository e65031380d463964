"""Where a KEEP's and a no-op DISCARD's wall time goes, with the lane's `performance.reuse` off (the experiment
as it was: no warm-up history, the judging always computed) and on, side by side in one run.

Two project copies of this tree (the embedded test model with its avoidable 0.15 s delay; the lane's shipped
protocol unless --fast), each initialised and baselined; then, alternating between the copies, the same KEEP (the
delay removed) and the same no-op (a comment) in each. Prints a Markdown table of the phase records
(pytest_dit_ar/state/phases.py) and writes the raw records as JSON.

    python -m lab.tools.fast_keeps --out /tmp/fast-keeps.json [--fast] [--lane embedded-cpu]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from pytest_dit_ar.state.phases import PhaseTimes
from tests.helpers.loop import commit_change, experiment, git, ledger_rows, make_project_copy, run, set_slow

ARMS = {"reuse off": False, "reuse on": True}


def project(dest: Path, lane: str, reuse: bool, fast: bool, model_tail: str = "") -> Path:
    """A baselined copy whose lane has `performance.reuse` = `reuse` (else the shipped protocol, or the tests' one),
    `model_tail` appended to its model's `__init__.py` before the baseline."""
    return baselined_copy(dest, lane, fast, {"reuse": reuse}, model_tail)


def baselined_copy(dest: Path, lane: str, fast: bool, settings: dict, model_tail: str = "") -> Path:
    """A project copy, initialised and baselined, whose lane's performance section is the tests' short protocol
    (`fast`) or the shipped one, with `settings` on top."""
    repo = make_project_copy(dest)
    if model_tail:
        target = repo / "model_under_test" / "__init__.py"
        target.write_text(target.read_text() + model_tail)
    cfg_path = repo / "config" / "autoresearch.json"
    cfg = json.loads(cfg_path.read_text())
    shipped = json.loads((Path(__file__).resolve().parents[2] / "config" / "autoresearch.json").read_text())
    perf = cfg["lanes"][lane]["performance"] if fast else shipped["lanes"][lane].get("performance", {})
    cfg["lanes"][lane]["performance"] = {**perf, **settings}
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    git(repo, "commit", "-qam", f"settings {settings}")
    run(repo, "init", "--tag", "t1", "--lane", lane, check=True)
    run(repo, "baseline", "--quiet", check=True)
    return repo


def judged(repo: Path, desc: str) -> dict:
    """Run the experiment of HEAD; its ledger status, wall time seen from outside, and phase record."""
    t0 = time.perf_counter()
    proc = experiment(repo, "exact", desc)
    outside = time.perf_counter() - t0
    row = ledger_rows(repo)[-1]
    data = json.loads((repo / row.run_dir / "experiment.json").read_text())
    perf = json.loads((repo / row.run_dir / "perf.json").read_text())
    segments = perf.get("segments") or []
    return {"status": row.status.word, "estimate_pct": row.improvement_pct, "command_s": outside,
            "phases": data.get("phases"), "reuse": data.get("reuse"), "verdict": proc.stdout.strip().splitlines()[-1],
            "pairs": len(segments), "first_pair_warmup_s": segments[0]["warmup_s"] if segments else None,
            "first_pair_timed_s": {"cand": segments[0]["cand_s"], "best": segments[0]["best_s"]} if segments else None}


def table(results: dict[str, dict[str, dict]]) -> list[str]:
    cols = [(arm, step) for step in ("keep", "no-op") for arm in results]
    lines = ["| phase (s) | " + " | ".join(f"{step}, {arm}" for arm, step in cols) + " |",
             "|---|" + "---|" * len(cols)]
    rows = [*PhaseTimes.PHASES, "total", "warmup_rounds", "warmup_reused", "judging_reused"]
    for name in rows:
        cells = []
        for arm, step in cols:
            value = (results[arm][step]["phases"] or {}).get(name)
            cells.append(f"{value:.1f}" if isinstance(value, float) else str(value))
        lines.append(f"| {name.replace('_', ' ')} | " + " | ".join(cells) + " |")
    lines.append("| verdict | " + " | ".join(f"{results[a][s]['status']} {results[a][s]['estimate_pct']:+.1f}%"
                                             if results[a][s]["estimate_pct"] is not None else results[a][s]["status"]
                                             for a, s in cols) + " |")
    lines.append("| pairs | " + " | ".join(str(results[a][s]["pairs"]) for a, s in cols) + " |")
    lines.append("| first pair's warm-ups, cand/best | " + " | ".join(
        "/".join(str(len((results[a][s]["first_pair_warmup_s"] or {}).get(k, []))) for k in ("cand", "best"))
        for a, s in cols) + " |")
    lines.append("| command wall s | " + " | ".join(f"{results[a][s]['command_s']:.1f}" for a, s in cols) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--lane", default="embedded-cpu")
    ap.add_argument("--fast", action="store_true", help="the end-to-end tests' short protocol instead of the lane's")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fast-keeps-") as tmp:
        repos = {arm: project(Path(tmp) / arm.replace(" ", "-"), args.lane, reuse, args.fast)
                 for arm, reuse in ARMS.items()}
        results: dict[str, dict[str, dict]] = {arm: {} for arm in ARMS}
        for arm, repo in repos.items():
            set_slow(repo, 0.0, "remove the avoidable delay")
            results[arm]["keep"] = judged(repo, "remove the avoidable delay")
        for arm, repo in repos.items():
            commit_change(repo, "model_under_test/__init__.py", "\n# a comment: nothing changes\n", "a no-op")
            results[arm]["no-op"] = judged(repo, "a no-op")
    args.out.write_text(json.dumps(results, indent=1))
    print("\n".join(table(results)))


if __name__ == "__main__":
    main()
