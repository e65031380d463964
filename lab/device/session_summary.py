"""Summarise one replayed session for the device scripts that judge a session
(lab/device/pixart_24gb.sh, true_win_and_noops.sh): per experiment the
verdict, the estimate, the warm-up rounds per side, the warm start, the cold compile and how the workers shared
the memory; and the kept chain's speed-up over the baseline. Reads a project's .autoresearch/, prints a table
and writes JSON.   python3 lab/device/session_summary.py PROJECT OUT.json"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path


def main(project: Path, out: Path) -> None:
    state = project / ".autoresearch"
    rows = list(csv.DictReader((state / "results.tsv").open(), delimiter="\t"))
    base = next((r for r in rows if r["status"] == "baseline"), None)
    base_ms = float(base["candidate"]) if base and base["candidate"] else None
    best_ms = base_ms
    table = []
    for r in rows:
        if r["status"] == "baseline":
            continue
        run = project / r["run_dir"]
        perf = json.loads((run / "perf.json").read_text()) if (run / "perf.json").exists() else {}
        st = perf.get("startup") or {}
        cand = float(r["candidate"]) if r["candidate"] else None
        if r["status"] == "keep" and cand:
            best_ms = cand
        table.append({"description": r["description"], "status": r["status"], "class": r["effective_class"],
                      "improvement_pct": r["improvement_pct"], "candidate_ms": cand, "peak_vram_mb": r["peak_vram_mb"],
                      "warmup_rounds": st.get("warmup_rounds"), "warmup_state": st.get("warmup_state"),
                      "warm_start_s": st.get("cand_warm_startup_s"), "best_start_s": st.get("best_startup_s"),
                      "cold_start_s": st.get("cand_cold_start_s"), "layouts": st.get("layouts"),
                      "live_peak_mb": st.get("live_peak_mb"), "reason": r["reason"]})
    chain = base_ms / best_ms if base_ms and best_ms else None
    summary = {"baseline_ms": base_ms, "best_ms": best_ms, "kept_chain_speedup": chain, "experiments": table}
    out.write_text(json.dumps(summary, indent=1))
    print(f"baseline {base_ms} ms, best {best_ms} ms, kept chain speed-up {chain and f'{chain:.2f}x'}")
    for t in table:
        print(f"- {t['status']:<20} {t['improvement_pct'] or '':>8}  warm start {t['warm_start_s']}  "
              f"cold {t['cold_start_s']}  warm-up {t['warmup_rounds']}  layouts {t['layouts']}  {t['description']}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
