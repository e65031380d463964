"""Guardrails relative to the best: memory and start-up (build + warm-up) may not grow beyond their limits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dit_ar_contract.config import load_config
from dit_ar_contract.errors import ConfigError
from perf_suite import guardrails as guard

PROJECT = Path(__file__).resolve().parents[2]


def test_ten_more_gigabytes_of_vram_are_refused_even_under_the_absolute_budget() -> None:
    best, cand = 9_000.0, 19_240.0  # both under a 24 GB budget
    assert guard.memory(cand, best, 24 * 1024.0).problem is None
    found = guard.memory_growth(cand, best, 10.0)
    assert found.problem is not None and "grew beyond" in found.problem


def test_unchanged_memory_passes_within_the_slack() -> None:
    assert guard.memory_growth(420.0, 400.0, 10.0).problem is None  # +5% on a small CPU resident set
    assert guard.memory_growth(600.0, 400.0, 10.0).problem is not None


def test_a_tripled_start_up_is_reported_not_judged() -> None:
    found = guard.startup_growth([30.2, 29.8], [10.1, 9.9], 100.0)
    assert found.problem is None and found.figures["startup_grew"] == "yes"
    assert found.figures["best_startup_s"] == pytest.approx(10.0)
    assert found.figures["startup_growth_pct"] == pytest.approx(200.0)
    assert guard.startup_growth([0.9, 1.4], [0.3, 0.35], 100.0).figures["startup_grew"] == "no"  # the 2 s slack


def test_the_warm_start_is_judged_against_the_lanes_absolute_budget() -> None:
    # wave 3's regional compile: 27.2 s cold; a warm start far below the generous 120 s default passes
    assert guard.startup_budget([6.5, 7.0, 6.8], 120.0).problem is None
    found = guard.startup_budget([130.0, 125.0], 120.0)
    assert found.problem is not None and "startup_budget_s" in found.problem
    assert found.figures["cand_warm_startup_s"] == pytest.approx(127.5)
    assert guard.startup_budget([], 120.0).problem is None  # no warm worker measured: nothing to judge
    assert guard.startup_budget([500.0], None).problem is None


def test_absent_limits_or_figures_check_nothing() -> None:
    assert guard.memory_growth(5e4, 1.0, None).problem is None
    assert guard.memory_growth(None, 1.0, 10.0).problem is None
    assert guard.startup_growth([], [1.0], 100.0).problem is None


def test_defaults_apply_and_a_negative_growth_limit_is_refused(tmp_path: Path) -> None:
    raw = json.loads((PROJECT / "config" / "autoresearch.json").read_text())
    lane = load_config(PROJECT / "config" / "autoresearch.json").lane("embedded-cpu")
    assert (lane.guardrails.memory_growth_pct, lane.guardrails.startup_growth_pct) == (10.0, 100.0)
    raw["lanes"]["embedded-cpu"]["guardrails"]["startup_growth_pct"] = -5
    (tmp_path / "config").mkdir()
    path = tmp_path / "config" / "autoresearch.json"
    path.write_text(json.dumps(raw))
    for rel in ("quality_suite/corpus",):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).symlink_to(PROJECT / rel)
    with pytest.raises(ConfigError, match="startup_growth_pct"):
        load_config(path)
