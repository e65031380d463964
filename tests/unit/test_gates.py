"""Quality gates per class (pure functions of synthetic measurements) and class inheritance from the best."""

from __future__ import annotations

import math

import pytest

from dit_ar_contract.config import load_config
from quality_suite import audit, gates
from quality_suite import noninferiority as ni
from quality_suite.audit import AuditEvidence
from tests.helpers.loop import PROJECT

QUALITY = load_config(PROJECT / "config" / "autoresearch.json").lanes["embedded-cpu"].quality
ENVELOPE = {"latent_rel_l2": 1e-6, "latent_max_abs": 1e-5, "psnr_db": 90.0, "ssim": 1.0}
LOWER = {"frechet_distance"}
SAME = AuditEvidence.from_dict({"audit": {"param_dtypes": {"float32": 10}, "weight_bytes": 40},
                                "activation_dtypes": ["float32"], "denoiser_rows_per_image": 20.0})


def fid(rel: float = 0.0, mx: float = 0.0, psnr: float = math.inf, ssim: float = 1.0, **extra: float) -> dict:
    return {"latent_rel_l2": rel, "latent_max_abs": mx, "psnr_db": psnr, "ssim": ssim, **extra}


def failed(checks: list[gates.Check]) -> list[str]:
    return [c.name for c in checks if not c.passed]


def result_of(metric: str, estimate: float, margin: float, reference: str = "baseline", se: float = 0.005,
           source: str = "approximate margin") -> ni.TestResult:
    """A paired test's result after one last look over 40 cases (bound = estimate + 2 se)."""
    look = ni.Look(40, estimate, se, 2.0, 0.05)
    decision, why = ni.decide(look, margin, last=True)
    return ni.TestResult(metric, reference, margin, source, (look,), decision, why)


# -- gates: exact ------------------------------------------------------------------------------

def test_exact_passes_inside_the_envelope_and_names_what_leaves_it() -> None:
    inside = gates.case_checks("exact", "c1", fid(2e-6, 2e-5, 85.0, 0.99995), QUALITY, ENVELOPE)
    assert failed(inside) == []
    outside = gates.case_checks("exact", "c1", fid(1e-3, 2e-5, 85.0, 0.99995), QUALITY, ENVELOPE)
    assert failed(outside) == ["latent_rel_l2"]
    text = next(c for c in outside if not c.passed).describe()
    assert text.startswith("latent_rel_l2 case c1: 0.001 (needs <= 1e-05)") and "envelope" in text


def test_exact_limits_use_multiple_floors_and_never_exceed_the_numerical_gate() -> None:
    lim = gates.exact_limits(ENVELOPE, QUALITY)
    assert lim["latent_rel_l2"] == pytest.approx(1e-5)  # 4 x 1e-6 is below the floor
    assert lim["psnr_db"] == pytest.approx(60.0)  # the floor, since 4 x the envelope's error is tighter
    wide = gates.exact_limits({"latent_rel_l2": 0.5, "latent_max_abs": 1.0, "psnr_db": 10.0, "ssim": 0.5}, QUALITY)
    num = QUALITY.numerical
    assert wide["latent_rel_l2"] == num.max_latent_rel_l2 and wide["psnr_db"] == num.min_psnr_db
    assert wide["ssim"] == num.min_ssim


# -- gates: numerical / approximate / quantization --------------------------------------------

def test_numerical_floors_worst_case_and_mean() -> None:
    ok_case = gates.case_checks("numerical", "c1", fid(0.01, 0.1, 35.0, 0.995), QUALITY, ENVELOPE)
    assert failed(ok_case) == []
    bad_case = gates.case_checks("numerical", "c2", fid(0.01, 0.1, 25.0, 0.995), QUALITY, ENVELOPE)
    assert failed(bad_case) == ["psnr_db"]
    summary = {"psnr_db": {"mean": 35.0}, "ssim": {"mean": 0.995}}
    agg = gates.aggregate_checks("numerical", summary, QUALITY, {}, {}, LOWER)
    assert failed(agg) == ["mean_psnr_db"]  # every case >= 30 dB, but the mean needs 38 dB


def test_lpips_is_gated_only_where_it_was_measured() -> None:
    assert "lpips" not in [c.name for c in gates.case_checks("numerical", "c", fid(psnr=50), QUALITY, ENVELOPE)]
    measured = gates.case_checks("numerical", "c", fid(psnr=50, lpips=0.2), QUALITY, ENVELOPE)
    assert failed(measured) == ["lpips"]


def test_approximate_is_non_inferiority_within_the_margin() -> None:
    base = {"judge_accuracy": 0.95, "frechet_distance": 10.0}
    cand = {"judge_accuracy": 0.93, "frechet_distance": 11.4}
    close = (result_of("judge_accuracy", 0.01, 0.025), result_of("frechet_distance", 1.0, 1.5, se=0.2))
    assert failed(gates.aggregate_checks("approximate", {}, QUALITY, cand, base, LOWER, task_tests=close)) == []
    worse = (result_of("judge_accuracy", 0.03, 0.025), result_of("frechet_distance", 1.4, 1.5, se=0.2))
    agg = gates.aggregate_checks("approximate", {}, QUALITY, cand, base, LOWER, task_tests=worse)
    assert failed(agg) == ["judge_accuracy", "frechet_distance"]
    text = [c.describe() for c in agg if not c.passed][0]
    assert text.startswith("judge_accuracy: 0.04 (needs <= 0.025)") and "degradation +0.03" in text
    assert "over 40 cases" in text and "not shown" in text  # the bound, its margin, the cases: the interval
    assert failed(gates.case_checks("approximate", "c", fid(0.3, 1.0, 20.0, 0.8), QUALITY, ENVELOPE)) == []
    none = gates.aggregate_checks("approximate", {}, QUALITY, {}, {}, LOWER)
    assert failed(none) == ["task_metrics"]  # nothing to show non-inferiority with
    untested = gates.aggregate_checks("approximate", {}, QUALITY, cand, base, LOWER)
    assert failed(untested) == ["task_tests"]  # task scores but no test: nothing is kept on missing evidence


def test_quantization_is_zero_regression_plus_numerical_floors() -> None:
    base = {"judge_accuracy": 0.95, "frechet_distance": 10.0}
    summary = {"psnr_db": {"mean": 45.0}, "ssim": {"mean": 0.999}}
    exact = (result_of("judge_accuracy", 0.0, 3e-5, se=0.0, source="resolution"),
             result_of("frechet_distance", 0.0, 5e-4, se=0.0, source="resolution"))
    same = gates.aggregate_checks("quantization", summary, QUALITY, dict(base), base, LOWER, task_tests=exact)
    assert failed(same) == [] and {"mean_psnr_db", "judge_accuracy", "frechet_distance"} <= {c.name for c in same}
    tiny = (exact[0], result_of("frechet_distance", 0.001, 5e-4, se=0.0, source="resolution"))
    assert failed(gates.aggregate_checks("quantization", summary, QUALITY, dict(base), base, LOWER,
                                         task_tests=tiny)) == ["frechet_distance"]
    lost = gates.case_checks("quantization", "c7", fid(0.01, 0.1, 40.0, 0.99), QUALITY, ENVELOPE,
                             base_pass=True, cand_pass=False)
    assert failed(lost) == ["task_case_pass"]
    assert failed(gates.case_checks("quantization", "c8", fid(0.01, 0.1, 40.0, 0.99), QUALITY, ENVELOPE,
                                    base_pass=False, cand_pass=False)) == []
    assert failed(gates.case_checks("quantization", "c9", fid(0.2, 0.1, 40.0, 0.99), QUALITY, ENVELOPE)) == \
        ["latent_rel_l2"]


def test_without_task_metrics_neither_approximate_nor_quantization_can_pass() -> None:
    summary = {"psnr_db": {"mean": 45.0}, "ssim": {"mean": 0.999}}  # pixels all but unchanged
    for cls in ("approximate", "quantization"):
        checks = gates.aggregate_checks(cls, summary, QUALITY, {}, {}, LOWER)
        assert failed(checks) == ["task_metrics"], cls
        assert any("this lane configures none" in c.message for c in checks)
    assert failed(gates.aggregate_checks("numerical", summary, QUALITY, {}, {}, LOWER)) == []


def test_the_quantization_gate_is_never_weaker_than_the_numerical_one() -> None:
    """Every case a numerical change would fail, a quantization fails too (same floors, more checks)."""
    for latent, psnr, ssim in ((0.2, 40.0, 0.99), (0.01, 20.9, 0.99), (0.01, 40.0, 0.5), (0.01, 40.0, 0.99)):
        numerical = failed(gates.case_checks("numerical", "c", fid(latent, 0.1, psnr, ssim), QUALITY, ENVELOPE))
        quantized = failed(gates.case_checks("quantization", "c", fid(latent, 0.1, psnr, ssim), QUALITY, ENVELOPE))
        assert set(numerical) <= set(quantized)
    base = {"judge_accuracy": 0.95}
    summary = {"psnr_db": {"mean": 31.0}, "ssim": {"mean": 0.95}}
    assert set(failed(gates.aggregate_checks("numerical", summary, QUALITY, base, base, LOWER))) <= \
        set(failed(gates.aggregate_checks("quantization", summary, QUALITY, base, base, LOWER)))


# -- a candidate inherits the class of the best --------------------------------------------------

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


def test_quantization_task_gate_stays_zero_regression_against_the_baseline_and_the_parent() -> None:
    """On an approximate best that improved a score, a quantization that gives some of it back still fails:
    it is no worse than the baseline but worse than its parent."""
    tests = (result_of("judge_accuracy", -0.02, 3e-5, se=0.002, source="resolution"),
             result_of("judge_accuracy", 0.01, 3e-5, reference="parent", se=0.002, source="resolution"))
    checks = gates.aggregate_checks("quantization", {}, QUALITY, {"judge_accuracy": 0.98},
                                    {"judge_accuracy": 0.96}, set(), approximate_outputs=True, task_tests=tests)
    assert [c.name for c in checks if not c.passed] == ["judge_accuracy vs parent"]


# -- every task metric for every class; the blur guard -----------------------------------------------

def test_exact_and_numerical_check_task_scores_within_their_benign_variation() -> None:
    base = {"judge_accuracy": 1.0, "frechet_distance": 15.0}
    spread = {"judge_accuracy": 0.0, "frechet_distance": 0.1}  # what the baseline's own reruns moved
    for cls in ("exact", "numerical"):
        same = gates.aggregate_checks(cls, {"psnr_db": {"mean": 99.0}, "ssim": {"mean": 1.0}}, QUALITY,
                                      {"judge_accuracy": 1.0, "frechet_distance": 15.3}, base, LOWER,
                                      task_envelope=spread)
        assert "judge_accuracy" not in failed(same) and "frechet_distance" not in failed(same)  # 0.3 <= 4 x 0.1
        drop = gates.aggregate_checks(cls, {"psnr_db": {"mean": 99.0}, "ssim": {"mean": 1.0}}, QUALITY,
                                      {"judge_accuracy": 0.975, "frechet_distance": 15.0}, base, LOWER,
                                      task_envelope=spread)
        assert "judge_accuracy" in failed(drop)  # the drop the exact gate used to print and ignore


def test_a_case_the_baseline_passed_must_still_pass_in_exact_numerical_and_quantization() -> None:
    for cls in ("exact", "numerical", "quantization"):
        lost = gates.case_checks(cls, "c1", fid(psnr=99.0), QUALITY, ENVELOPE, base_pass=True, cand_pass=False)
        assert failed(lost) == ["task_case_pass"], cls


def test_the_approximate_gate_bounds_the_change_of_fine_detail() -> None:
    base = {"judge_accuracy": 1.0}
    tests = (result_of("judge_accuracy", 0.0, 0.025),)
    ok = gates.aggregate_checks("approximate", {}, QUALITY, dict(base), base, LOWER, sharpness_change=0.08,
                                task_tests=tests)
    blurred = gates.aggregate_checks("approximate", {}, QUALITY, dict(base), base, LOWER, sharpness_change=0.45,
                                     task_tests=tests)
    assert failed(ok) == [] and failed(blurred) == ["sharpness_change"]


def test_laplacian_energy_sees_a_blur_and_noise() -> None:
    import torch

    from quality_suite import sharpness

    torch.manual_seed(0)
    digit = (torch.rand(1, 32, 32) > 0.7).float().repeat(3, 1, 1)
    blur = torch.nn.functional.avg_pool2d(digit[None], 3, 1, 1)[0]
    noisy = (digit + 0.2 * torch.randn_like(digit)).clamp(0, 1)
    assert sharpness.mean_abs_log_change({"a": digit}, {"a": digit}) == 0.0
    assert sharpness.mean_abs_log_change({"a": blur}, {"a": digit}) > 0.5
    assert sharpness.mean_abs_log_change({"a": noisy}, {"a": blur}) > 0.5


# -- the task tolerance of exact and numerical changes cannot collapse to zero ------------------------

def test_a_zero_measured_spread_still_leaves_the_scores_numerical_resolution() -> None:
    """The demo's batched guidance moved the Fréchet distance by 3.8e-6 (about 2 float32 ulps) against a
    baseline whose reruns agreed to the bit: a tolerance of 0 discarded an exact speedup."""
    base = {"judge_accuracy": 0.9583333, "frechet_distance": 17.8345}
    zero = {"judge_accuracy": 0.0, "frechet_distance": 0.0}
    summary = {"psnr_db": {"mean": 99.0}, "ssim": {"mean": 1.0}}
    moved = {"judge_accuracy": 0.9583333, "frechet_distance": 17.8345 + 3.8e-6}
    for cls in ("exact", "numerical"):
        assert failed(gates.aggregate_checks(cls, summary, QUALITY, moved, base, LOWER, task_envelope=zero)) == []
        worse = {"judge_accuracy": 0.9583333, "frechet_distance": 17.8345 * 1.001}  # a real change
        checks = gates.aggregate_checks(cls, summary, QUALITY, worse, base, LOWER, task_envelope=zero)
        assert failed(checks) == ["frechet_distance"]
        flipped = {"judge_accuracy": 0.9583333 - 1 / 48, "frechet_distance": 17.8345}  # one case of 48
        assert failed(gates.aggregate_checks(cls, summary, QUALITY, flipped, base, LOWER, task_envelope=zero)) == \
            ["judge_accuracy"]


def test_the_resolution_floor_scales_with_the_scores_magnitude_and_a_larger_spread_wins() -> None:
    assert gates.resolution_floor(17.83) == pytest.approx(256 * 2.0 ** -23 * 17.83)
    assert gates.resolution_floor(0.5) == gates.resolution_floor(1.0) == pytest.approx(3.05e-5, rel=1e-3)
    tol = gates.task_tolerances({"frechet_distance": 17.83}, {"frechet_distance": 0.01}, 4.0)
    assert tol["frechet_distance"] == pytest.approx(0.04)


def test_a_failing_task_check_prints_enough_digits_to_see_the_difference() -> None:
    base = {"frechet_distance": 17.8345}
    checks = gates.aggregate_checks("exact", {}, QUALITY, {"frechet_distance": 17.8345 * 1.0001}, base, LOWER,
                                    task_envelope={"frechet_distance": 0.0})
    text = next(c for c in checks if not c.passed).describe()
    value, threshold = text.split(": ")[1].split(" (needs <= ")
    assert value != threshold.split(")")[0], text
