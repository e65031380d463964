"""Quality is judged against the original baseline, so what the best already changed is inherited."""

from __future__ import annotations

from pytest_dit_ar.config import load_config
from quality_suite import audit, gates
from loop_helpers import PROJECT

SAME = {"audit": {"param_dtypes": {"float32": 10}, "weight_bytes": 40}, "activation_dtypes": ["float32"],
        "denoiser_rows_per_image": 20.0}
QUALITY = load_config(PROJECT / "config" / "autoresearch.json").lanes["embedded-cpu"].quality


def test_a_candidate_inherits_the_class_of_the_best() -> None:
    cls, reasons = audit.effective_class("exact", SAME, SAME, inherited="numerical")
    assert cls == "numerical" and any("current best is already numerical" in r for r in reasons)
    assert audit.effective_class("exact", SAME, SAME)[0] == "exact"
    assert audit.effective_class("quantization", SAME, SAME, inherited="approximate")[0] == "quantization"


def test_quantization_on_top_of_an_approximate_best_gets_approximate_fidelity_floors() -> None:
    drifted = {"latent_rel_l2": 0.15, "latent_max_abs": 0.5, "psnr_db": 26.0, "ssim": 0.9}
    strict = gates.case_checks("quantization", "c1", drifted, QUALITY, {}, True, True)
    assert not all(c.passed for c in strict)  # the numerical floors reject a step cut's drift
    approx = audit.approximate_outputs("quantization", SAME, SAME, inherited="approximate")
    loose = gates.case_checks("quantization", "c1", drifted, QUALITY, {}, True, True, approx)
    assert approx and all(c.passed for c in loose)
    failing_case = gates.case_checks("quantization", "c1", drifted, QUALITY, {}, True, False, approx)
    assert not all(c.passed for c in failing_case)  # the baseline passed the case: it must still pass


def test_quantization_task_gate_stays_zero_regression_on_an_approximate_best() -> None:
    checks = gates.aggregate_checks("quantization", {}, QUALITY, {"judge_accuracy": 0.975},
                                    {"judge_accuracy": 1.0}, set(), approximate_outputs=True)
    assert [c.name for c in checks if not c.passed] == ["judge_accuracy"]
