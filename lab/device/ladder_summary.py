"""Summarise a GPU ladder session (lab/device/ladder.sh): per step the verdict, the classes, the paired estimate,
both sides' medians, the experiment's wall time and where it went; then the kept chain's speed-up over the
session's baseline, twice: as the product of the kept steps' paired median ratios (best before / candidate, each
from one experiment's interleaved rounds: the figure the protocol trusts) and as the baseline's median over the
last kept candidate's (absolute medians of different processes); the phase totals over the steps and, per step,
its phases (the run record's phase record: start-up, quality corpus, quality judging, warm-up, timed rounds, round
checks, close, other), warm-up rounds and what it reused. Reads PROJECT/.autoresearch, prints the lines, writes
JSON.

    python3 lab/device/ladder_summary.py PROJECT OUT.json
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

# the run record's phase record (pytest_dit_ar/state/phases.py); OLD_PHASES: the clock's names, for runs recorded
# before it
PHASES = ("start_up", "quality_corpus", "quality_judging", "warm_up", "timed", "round_checks", "close", "other")
OLD_PHASES = ("quality_worker_start", "quality_corpus", "quality_metrics", "timing_startup", "timing_warmup",
              "timing_timed", "timing_round_checks", "harness_and_pytest")


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _record(project: Path, run_dir: str, name: str) -> dict:
    path = project / run_dir / name
    return json.loads(path.read_text()) if run_dir and path.is_file() else {}


def steps(project: Path) -> tuple[dict | None, list[dict]]:
    """The baseline row and one entry per judged experiment, in ledger order."""
    rows = list(csv.DictReader((project / ".autoresearch" / "results.tsv").open(), delimiter="\t"))
    base = next((r for r in rows if r["status"] == "baseline"), None)
    table = []
    for r in rows:
        if r["status"] == "baseline":
            continue
        record = _record(project, r["run_dir"], "experiment.json")
        seconds, phases = record.get("seconds") or {}, record.get("phases") or {}
        table.append({"description": r["description"], "status": r["status"], "declared": r["declared_class"],
                      "effective": r["effective_class"], "estimate_pct": _float(r["improvement_pct"]),
                      "best_ms": _float(r["best_before"]), "candidate_ms": _float(r["candidate"]),
                      "quality": r["quality_summary"], "reason": r["reason"], "flags": r["flags"],
                      "wall_s": phases.get("total", seconds.get("total")),
                      "phases_s": {k: phases[k] for k in PHASES if k in phases} if phases else
                      {k: seconds[k] for k in OLD_PHASES if k in seconds},
                      "warmup_rounds": phases.get("warmup_rounds"), "warmup_reused": phases.get("warmup_reused"),
                      "judging_reused": phases.get("judging_reused")})
    return base, table


def chain(base_ms: float | None, table: list[dict]) -> dict:
    """The kept chain's speed-up: chained paired ratios, and absolute medians."""
    kept = [t for t in table if t["status"] == "keep" and t["best_ms"] and t["candidate_ms"]]
    paired = math.prod(t["best_ms"] / t["candidate_ms"] for t in kept) if kept else None
    last = kept[-1]["candidate_ms"] if kept else None
    return {"baseline_ms": base_ms, "kept_steps": len(kept), "best_ms": last, "chained_paired_ratio": paired,
            "absolute_ratio": base_ms / last if base_ms and last else None,
            "chained_after_first_step": math.prod(t["best_ms"] / t["candidate_ms"] for t in kept[1:])
            if len(kept) > 1 else None}


def phase_totals(table: list[dict]) -> dict[str, float]:
    """Each phase's seconds summed over the steps that recorded the phase record."""
    totals: dict[str, float] = {}
    for t in table:
        for k, v in t["phases_s"].items():
            if k in PHASES:
                totals[k] = totals.get(k, 0.0) + float(v)
    return totals


def lines(summary: dict) -> list[str]:
    c = summary["chain"]
    fmt = (lambda x: f"{x:.2f}x" if x else "n/a")
    out = [f"baseline {c['baseline_ms']} ms; {c['kept_steps']} steps kept; last kept candidate {c['best_ms']} ms",
           f"kept chain: {fmt(c['chained_paired_ratio'])} (product of the kept steps' paired median ratios), "
           f"{fmt(c['absolute_ratio'])} (baseline median / last kept candidate's median); after the first kept "
           f"step: {fmt(c['chained_after_first_step'])}"]
    totals = phase_totals(summary["experiments"])
    if totals:
        out.append("phase totals over the steps (s): " + ", ".join(f"{k} {v:.1f}" for k, v in totals.items()))
    for t in summary["experiments"]:
        est = f"{t['estimate_pct']:+.2f}%" if t["estimate_pct"] is not None else "-"
        sides = f"{t['best_ms'] or 0:.1f} -> {t['candidate_ms'] or 0:.1f} ms" if t["candidate_ms"] else "not timed"
        wall = f"{t['wall_s']:.0f} s" if t["wall_s"] else "?"
        phases = ", ".join(f"{k} {v:.1f}" for k, v in t["phases_s"].items())
        out.append(f"- {t['status']:<20} {est:>9}  {sides:<22} class {t['declared']}->{t['effective']}  wall {wall} "
                   f"({phases})  {t['description']}")
        if t.get("warmup_rounds") is not None:
            out.append(f"    warm-up rounds {t['warmup_rounds']}, quality generates reused as warm-up "
                       f"{t['warmup_reused']}, the best's judging reused: {'yes' if t['judging_reused'] else 'no'}")
        if t["status"] != "keep" and t["reason"]:
            out.append(f"    reason: {t['reason'][:300]}")
    return out


def main(project: Path, out: Path) -> None:
    base, table = steps(project)
    summary = {"chain": chain(_float(base["candidate"]) if base else None, table), "experiments": table}
    out.write_text(json.dumps(summary, indent=1))
    print("\n".join(lines(summary)))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
