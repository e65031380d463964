"""Performance of the model under test against the current best, timed out of process (DESIGN §6)."""

import pytest

pytestmark = pytest.mark.perf


def test_speed_against_best(dit_ar, dit_ar_judgement):
    """Inside an experiment: a significant, confirmed win within the guardrails. In a plain run: no
    significant slowdown against the best worktree."""
    if dit_ar.experiment_mode and any(v != "passed" for v in dit_ar.outcomes["quality"].values()):
        pytest.skip("the quality gate failed, so speed is not measured (quality is judged first)")
    if dit_ar_judgement.best_root is None:
        pytest.fail("no best worktree to compare with: run `dit-ar baseline` first", pytrace=False)
    outcome = dit_ar_judgement.performance()
    if dit_ar.experiment_mode:
        assert outcome.keep, "; ".join(outcome.reasons)
        return
    stats = outcome.blocks[0].stats
    min_gain = float(dit_ar_judgement.ctx.lane.performance["min_improvement_pct"])
    slower = stats.p_value > 1 - float(dit_ar_judgement.ctx.lane.performance["alpha"]) and stats.improvement_pct < -min_gain
    assert not slower, f"slower than the best: {stats.improvement_pct:+.2f}% (p_faster={stats.p_value:.3g})"
