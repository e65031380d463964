"""Performance of the model under test against the current best, timed out of process (DESIGN §6)."""

import pytest

pytestmark = pytest.mark.perf


def test_speed_against_best(dit_ar, dit_ar_evidence):
    """Inside an experiment: a significant, confirmed win within the guardrails. In a plain run: no
    significant slowdown against the best worktree."""
    if dit_ar.experiment_mode and dit_ar.outcomes.quality_failed():
        pytest.skip("the quality gate failed, so speed is not measured (quality is judged first)")
    if dit_ar_evidence.best_root is None:
        pytest.fail("no best worktree to compare with: run `dit-ar baseline` first", pytrace=False)
    outcome = dit_ar_evidence.performance()
    if dit_ar.experiment_mode:
        assert outcome.keep, "; ".join(outcome.reasons)
        return
    stats = outcome.blocks[0].stats
    protocol = dit_ar_evidence.session.lane.performance
    slower = stats.p_value > 1 - protocol.alpha and stats.improvement_pct < -protocol.min_improvement_pct
    assert not slower, f"slower than the best: {stats.improvement_pct:+.2f}% (p_faster={stats.p_value:.3g})"
