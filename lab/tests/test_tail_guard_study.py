"""The p95 guardrail study (lab/studies/tail_guard_study.py) at a few trials: its scenarios run through the shipped
guardrail, the pooled point estimate refuses a no-op under one-sided load spikes far more often than the paired
bound, and a heavy staller is refused by both."""

from __future__ import annotations

from lab.studies.tail_guard_study import study


def test_the_paired_bound_refuses_stalls_not_load_spikes() -> None:
    rows = {name: (old, new) for name, old, new in study(trials=40, segments=4, rounds=12, tolerance_pct=10.0, seed=3)}
    old, new = rows["no-op, 5% one-sided load spikes"]
    assert new <= 0.05 and old > new + 0.1
    assert rows["no-op, quiet host"] == (0.0, 0.0)
    assert min(rows["stalls +400 ms in 20% of rounds, 5% load spikes"]) >= 0.8
