"""Summarise a GPU ladder session (lab/device/ladder.sh): per step the verdict, the classes, the paired estimate,
both sides' medians, the experiment's wall time and where it went; then the kept chain's speed-up over the
session's baseline, twice: as the product of the kept steps' paired median ratios (best before / candidate, each
from one experiment's interleaved rounds: the figure the protocol trusts) and as the baseline's median over the
last kept candidate's (absolute medians of different processes); the phase totals over the steps and, per step,
its phases (the run record's phase record: start-up, quality corpus, quality judging, warm-up, timed rounds, round
checks, close, other), warm-up rounds and what it reused; and the night's figures (`night`): judged experiments
per hour (over the experiments' own wall time, and over the session from the baseline's end to the last row),
the no-ops' outcomes and centring (each no-op's estimate and interval against its offset bound), the slowest
KEEP and no-op, and the first timed pair's bias (its paired log ratio against the later pairs' of the same
experiment, over every experiment timed in more than one pair). Reads PROJECT/.autoresearch, prints the lines,
writes JSON.

    python3 lab/device/ladder_summary.py PROJECT OUT.json
"""

from __future__ import annotations

import csv
import json
import math
import statistics
import sys
from datetime import datetime
from pathlib import Path

# the run record's phase record (pytest_dit_ar/state/phases.py); OLD_PHASES: the clock's names, for runs recorded
# before it
PHASES = ("start_up", "quality_corpus", "quality_judging", "warm_up", "timed", "round_checks", "close", "harness",
          "other")
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
        perf = _record(project, r["run_dir"], "perf.json")
        table.append({"description": r["description"], "status": r["status"], "declared": r["declared_class"],
                      "effective": r["effective_class"], "estimate_pct": _float(r["improvement_pct"]),
                      "best_ms": _float(r["best_before"]), "candidate_ms": _float(r["candidate"]),
                      "quality": r["quality_summary"], "reason": r["reason"], "flags": r["flags"],
                      "wall_s": phases.get("total", seconds.get("total")),
                      "phases_s": {k: phases[k] for k in PHASES if k in phases} if phases else
                      {k: seconds[k] for k in OLD_PHASES if k in seconds},
                      "warmup_rounds": phases.get("warmup_rounds"), "warmup_reused": phases.get("warmup_reused"),
                      "judging_reused": phases.get("judging_reused"), "timestamp": r["timestamp"],
                      "look": perf.get("look") or {}, "segment_log_ratios": segment_log_ratios(perf)})
    return base, table


def segment_log_ratios(perf: dict) -> list[float]:
    """Per timed pair (segment), in order: log(median candidate round / median best round)."""
    out = []
    for seg in perf.get("segments") or []:
        cand, best = seg.get("cand_s") or [], seg.get("best_s") or []
        if cand and best:
            out.append(math.log(statistics.median(cand) / statistics.median(best)))
    return out


NOOP = "a no-op against the best"


def first_pair_bias(table: list[dict]) -> dict:
    """The first pair's log ratio minus the mean of the later pairs' (per experiment with >= 2 pairs), in %."""
    diffs = [100 * (r[0] - statistics.fmean(r[1:])) for r in (t["segment_log_ratios"] for t in table) if len(r) > 1]
    return {"experiments": len(diffs), "mean_pct": statistics.fmean(diffs) if diffs else None,
            "median_pct": statistics.median(diffs) if diffs else None, "per_experiment_pct": diffs}


def _time(stamp: str) -> datetime | None:
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z")
    except (TypeError, ValueError):
        return None


def night(base: dict | None, table: list[dict]) -> dict:
    """Experiments per hour, the no-ops' outcomes and centring, the slowest KEEP and no-op, the first pair's bias."""
    walls = [t["wall_s"] for t in table if t["wall_s"]]
    start, end = _time(base["timestamp"]) if base else None, _time(table[-1]["timestamp"]) if table else None
    span = (end - start).total_seconds() if start and end else None
    noops = [t for t in table if t["description"].startswith(NOOP)]
    rows = [{"estimate_pct": t["estimate_pct"], "lower_pct": t["look"].get("lower_pct"),
             "upper_pct": t["look"].get("upper_pct"), "bound_pct": t["look"].get("bound_pct"),
             "status": t["status"]} for t in noops]
    excluded = [r for r in rows if r["lower_pct"] is not None and r["bound_pct"] is not None
                and (r["lower_pct"] > r["bound_pct"] or r["upper_pct"] < -r["bound_pct"])]
    estimates = [r["estimate_pct"] for r in rows if r["estimate_pct"] is not None]
    keeps = [t["wall_s"] for t in table if t["status"] == "keep" and t["wall_s"]]
    return {"experiments": len(table), "experiment_wall_s": sum(walls),
            "per_hour_own_wall": 3600 * len(walls) / sum(walls) if walls else None,
            "session_span_s": span, "per_hour_session": 3600 * len(table) / span if span else None,
            "noops": rows, "noops_discarded": sum(r["status"] != "keep" for r in rows),
            "noop_median_pct": statistics.median(estimates) if estimates else None,
            "noops_excluding_zero_beyond_bound": len(excluded),
            "slowest_keep_s": max(keeps) if keeps else None,
            "slowest_noop_s": max((t["wall_s"] for t in noops if t["wall_s"]), default=None),
            "first_pair": first_pair_bias(table)}


def night_lines(n: dict) -> list[str]:
    fmt = (lambda x, spec=".1f": format(x, spec) if x is not None else "n/a")
    fp = n["first_pair"]
    return [f"night: {n['experiments']} judged experiments; {fmt(n['per_hour_own_wall'])} per hour of their own wall "
            f"time ({fmt(n['experiment_wall_s'], '.0f')} s), {fmt(n['per_hour_session'])} per hour of the session "
            f"({fmt(n['session_span_s'], '.0f')} s from the baseline's row to the last)",
            f"no-ops: {len(n['noops'])}, discarded {n['noops_discarded']}, median estimate "
            f"{fmt(n['noop_median_pct'], '+.2f')}%, intervals excluding 0 beyond the offset bound: "
            f"{n['noops_excluding_zero_beyond_bound']}; "
            + "; ".join(f"{fmt(r['estimate_pct'], '+.2f')}% [{fmt(r['lower_pct'], '+.2f')}, "
                        f"{fmt(r['upper_pct'], '+.2f')}] bound {fmt(r['bound_pct'], '.2f')}" for r in n["noops"]),
            f"slowest KEEP {fmt(n['slowest_keep_s'], '.0f')} s, slowest no-op {fmt(n['slowest_noop_s'], '.0f')} s",
            f"first timed pair against the later pairs: mean {fmt(fp['mean_pct'], '+.2f')}%, median "
            f"{fmt(fp['median_pct'], '+.2f')}% over {fp['experiments']} experiments timed in more than one pair"]


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
    summary = {"chain": chain(_float(base["candidate"]) if base else None, table), "experiments": table,
               "night": night(base, table)}
    out.write_text(json.dumps(summary, indent=1))
    print("\n".join(lines(summary) + night_lines(summary["night"])))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
