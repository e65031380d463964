"""lab/device/ladder_summary.py: the kept chain from a ledger (chained paired ratios and absolute medians)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "device" / "ladder_summary.py"
spec = importlib.util.spec_from_file_location("ladder_summary", HERE)
ladder_summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ladder_summary)

HEADER = ("timestamp run_id lane commit parent status declared_class effective_class metric best_before candidate "
          "improvement_pct p_value peak_vram_mb quality_summary description run_dir reason flags").split()


def row(status: str, best: str, cand: str, desc: str, run_dir: str = "", reason: str = "") -> str:
    values = dict.fromkeys(HEADER, "")
    values.update(status=status, best_before=best, candidate=cand, description=desc, run_dir=run_dir, reason=reason,
                  declared_class="exact", effective_class="exact", improvement_pct="1.0")
    return "\t".join(values[h] for h in HEADER)


def test_the_chain_multiplies_the_kept_steps_paired_ratios(tmp_path: Path) -> None:
    state = tmp_path / ".autoresearch"
    (state / "runs" / "r1").mkdir(parents=True)
    (state / "runs" / "r1" / "experiment.json").write_text(json.dumps({"seconds": {"total": 80.0,
                                                                                   "quality_corpus": 10.0}}))
    lines = ["\t".join(HEADER), row("baseline", "", "500", "baseline"),
             row("keep", "480", "320", "batch", ".autoresearch/runs/r1"),
             row("discard-performance", "330", "331", "no-op", reason="not faster by 2%"),
             row("keep", "300", "75", "graphs")]
    (state / "results.tsv").write_text("\n".join(lines) + "\n")
    base, table = ladder_summary.steps(tmp_path)
    chain = ladder_summary.chain(float(base["candidate"]), table)
    assert chain["chained_paired_ratio"] == pytest.approx(480 / 320 * 300 / 75)
    assert chain["absolute_ratio"] == pytest.approx(500 / 75)
    assert chain["chained_after_first_step"] == pytest.approx(4.0)
    assert table[0]["wall_s"] == 80.0 and table[0]["phases_s"] == {"quality_corpus": 10.0}
    text = "\n".join(ladder_summary.lines({"chain": chain, "experiments": table}))
    assert "6.00x" in text and "reason: not faster by 2%" in text


def test_the_phase_record_gives_each_step_s_phases_and_the_totals(tmp_path: Path) -> None:
    state = tmp_path / ".autoresearch"
    phases = {"start_up": 5.0, "quality_corpus": 4.0, "quality_judging": 0.0, "warm_up": 3.0, "timed": 8.0,
              "round_checks": 1.0, "close": 0.5, "other": 2.5, "total": 24.0, "warmup_rounds": 9, "warmup_reused": 7,
              "judging_reused": True}
    for name in ("r1", "r2"):
        (state / "runs" / name).mkdir(parents=True)
        (state / "runs" / name / "experiment.json").write_text(json.dumps({"phases": phases, "seconds": {}}))
    lines = ["\t".join(HEADER), row("baseline", "", "100", "baseline"),
             row("keep", "100", "50", "a", ".autoresearch/runs/r1"),
             row("discard-performance", "50", "50", "b", ".autoresearch/runs/r2", reason="not faster")]
    (state / "results.tsv").write_text("\n".join(lines) + "\n")
    base, table = ladder_summary.steps(tmp_path)
    assert table[0]["wall_s"] == 24.0 and table[1]["phases_s"]["timed"] == 8.0
    assert ladder_summary.phase_totals(table)["start_up"] == 10.0
    text = "\n".join(ladder_summary.lines({"chain": ladder_summary.chain(100.0, table), "experiments": table}))
    assert "phase totals over the steps (s): start_up 10.0, quality_corpus 8.0" in text
    assert "warm-up rounds 9, quality generates reused as warm-up 7, the best's judging reused: yes" in text
