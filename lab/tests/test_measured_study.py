"""The measured study's evaluation (lab/studies/measured_study.py): both protocols judged on the same segments,
the sequential one on the first `rounds` rounds of each, the earlier one as a block and a confirming block."""

from __future__ import annotations

import numpy as np

from dit_ar_contract.config import PerfProtocol
from lab.studies.measured_study import new_protocol, old_protocol, summarize
from perf_suite.sequential import Design
from perf_suite.studies import StudyArm, StudyPair

DESIGN = Design(alpha=0.01, min_improvement_pct=2.0, min_segments=2, max_segments=6, rounds=8)


def segment(rng: np.random.Generator, effect: float, n: int) -> tuple[list[float], list[float]]:
    """Paired times: a shared per-round machine state, per-process offsets and per-side noise (as in
    tests/unit/test_sequential.py, whose test this was before the study left the product)."""
    state = 0.3 * rng.choice([1.0, 1.0, 1.2, 1.5, 2.0], size=n)
    best = state * np.exp(rng.normal(0, 0.01) + rng.normal(0, 0.03, n))
    cand = state * (1 - effect) * np.exp(rng.normal(0, 0.01) + rng.normal(0, 0.03, n))
    return list(cand), list(best)


def test_the_study_judges_both_protocols_on_the_same_segments() -> None:
    rng = np.random.default_rng(8)
    arms = {}
    for arm, effect in (("null", 0.0), ("10", 0.10)):
        arms[arm] = StudyArm(arm, tuple(StudyPair(*map(tuple, segment(rng, effect, n=16))) for _ in range(12)))
    protocol = PerfProtocol()
    new = new_protocol(arms["10"].pairs, DESIGN, rounds=8)
    assert new and all(r.keep and r.rounds == 8 * r.segments for r in new)  # only the first 8 rounds
    old = old_protocol(arms["10"].pairs, protocol, "latency_ms", rounds=16)
    assert old and all(r.segments in (1, 2) and r.rounds == 16 * r.segments for r in old)
    summary = summarize(arms, protocol, "latency_ms", old_rounds=16, orders=50)
    assert summary["10"].new.keep_rate == 1.0 and summary["null"].new.keeps == 0
    assert summary["10"].new.resampled.keep_rate == 1.0 and summary["null"].new.resampled.orders == 50
    assert sum(r.segments for r in new_protocol(arms["null"].pairs, DESIGN, 8)) <= len(arms["null"].pairs)
