"""Performance of the model under test against the current best, timed out of process (docs/design/speed-verdict.md)."""

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
    look = outcome.look
    minimum = dit_ar_evidence.session.lane.performance.min_improvement_pct
    slower = look.upper_pct < -minimum  # the whole interval says slower by more than the minimum
    assert not slower, (f"slower than the best: {look.estimate_pct:+.2f}% "
                        f"[{look.lower_pct:+.2f}%, {look.upper_pct:+.2f}%]")
