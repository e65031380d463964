"""lab/device/ladder_summary.py: the kept chain from a ledger (chained paired ratios and absolute medians)."""

from __future__ import annotations

import importlib.util
import json
import math
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


def test_the_night_counts_experiments_per_hour_the_no_ops_and_the_first_pairs_bias(tmp_path: Path) -> None:
    state = tmp_path / ".autoresearch"
    looks = {"r1": {"lower_pct": 30.0, "upper_pct": 50.0, "bound_pct": 2.5},
             "r2": {"lower_pct": -2.0, "upper_pct": 1.5, "bound_pct": 2.5},
             "r3": {"lower_pct": 3.0, "upper_pct": 6.0, "bound_pct": 2.5}}
    segments = {"r1": [([1.0] * 4, [1.1] * 4), ([1.0] * 4, [1.0] * 4)], "r2": [([1.0] * 4, [1.0] * 4)], "r3": []}
    for name in looks:
        (state / "runs" / name).mkdir(parents=True)
        (state / "runs" / name / "experiment.json").write_text(json.dumps({"phases": {"total": 30.0}}))
        segs = [{"best_s": b, "cand_s": c} for b, c in segments[name]]
        (state / "runs" / name / "perf.json").write_text(json.dumps({"look": looks[name], "segments": segs}))
    lines = ["\t".join(HEADER), row("baseline", "", "100", "baseline"),
             row("keep", "100", "60", "a win", ".autoresearch/runs/r1"),
             row("discard-performance", "60", "60", "a no-op against the best (one comment, 1)",
                 ".autoresearch/runs/r2"),
             row("discard-performance", "60", "58", "a no-op against the best (one comment, 2)",
                 ".autoresearch/runs/r3")]
    stamps = ["2026-12-07T01:00:00+0000", "2026-12-07T01:00:30+0000", "2026-12-07T01:01:00+0000",
              "2026-12-07T01:01:30+0000"]
    lines = [lines[0]] + [s + line for s, line in zip(stamps, lines[1:])]  # the timestamp is the first column
    (state / "results.tsv").write_text("\n".join(lines) + "\n")
    base, table = ladder_summary.steps(tmp_path)
    night = ladder_summary.night(base, table)
    assert night["per_hour_own_wall"] == pytest.approx(120.0)  # 3 experiments in 90 s of their own wall time
    assert night["per_hour_session"] == pytest.approx(120.0)  # 3 rows in the 90 s after the baseline's
    assert night["noops_discarded"] == 2 and night["noops_excluding_zero_beyond_bound"] == 1  # r3's 3.0 > 2.5
    assert night["noop_median_pct"] == pytest.approx(1.0)
    assert night["first_pair"]["experiments"] == 1
    assert night["first_pair"]["mean_pct"] == pytest.approx(100 * math.log(1.1))
    assert "3 judged experiments; 120.0 per hour" in "\n".join(ladder_summary.night_lines(night))
