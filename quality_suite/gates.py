"""Quality gates per experiment class (docs/design/quality.md): pure functions from measurements to checks.

Every check carries the metric, the case, the value, the comparison and the threshold so that a
verdict can say exactly what failed. Thresholds come from the config's quality contract:

* exact        -- per case within the baseline's calibrated noise envelope x ``exact.envelope_multiple``,
                  never tighter than the ``exact.*_floor`` values, never looser than the numerical gate;
* numerical    -- per case ``numerical.max_latent_rel_l2 / min_psnr_db / min_ssim [/ max_lpips]`` and over
                  the corpus ``numerical.min_mean_psnr_db / min_mean_ssim``;
* approximate  -- every per-case task score non-inferior within ``approximate.task_margin[name]`` (absolute for
                  higher-is-better scores, relative for lower-is-better ones): a paired non-inferiority test
                  over the cases (quality_suite/task_tests.py) whose one-sided bound must lie within the margin,
                  with its severe-case condition, plus the looser per-case
                  ``approximate.min_psnr_db / min_ssim [/ max_lpips]``; a lane without task metrics cannot show
                  non-inferiority, so the gate fails;
* quantization -- a tolerance claim: every per-case task score's paired test bound within the metric's resolution
                  (what a harmless change does to it) and no case beyond tau_q, against the baseline and the
                  parent, every case the baseline passed still passes, plus the numerical gate (the approximate
                  floors when the outputs are already an approximation's, where a numerical change would get the
                  approximate gate with its margins); a lane without task metrics cannot show it, so the gate fails.

A set metric (a Frechet distance) is reported beside the tests, not gated (quality_suite/task_tests.py,
`REPORTED_WHY`); a lane whose only task metric is a set metric cannot pass either class.

The rule for lanes without task metrics is one for both classes whose claim is about the task rather than
the pixels: neither an approximate nor a quantization change can be kept there. Fidelity floors alone say
how far the pixels moved, not whether the model still does its job (an int8 change once passed at 20.9 dB
on fidelity alone). Configure a task metric for the lane (docs/design/quality.md) to open both classes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from dit_ar_contract.classes import ChangeClass
from dit_ar_contract.config import ApproximateGate, NumericalGate, QualityContract

from .metrics import mse_from_psnr
from .noninferiority import TestResult

# The task-score tolerance of exact and numerical changes never falls below the score's own numerical
# resolution: RESOLUTION_ULPS float32 ulps of its magnitude (at least of 1.0). The baseline's benign reruns can
# agree to the last bit by chance (a measured spread of exactly 0), and then a float-level change of an exact
# speedup (3.8e-6 on a Fréchet distance of 17.83, about 2 ulps) would fail. 256 ulps of 17.83 is 5.4e-4
# (3e-5 relative); for an accuracy over n cases it is 3.1e-5, far below one case (1/n): a flipped case still fails.
FLOAT32_EPS = 2.0 ** -23
RESOLUTION_ULPS = 256


def resolution_floor(score: float) -> float:
    """The smallest task-score tolerance an exact or numerical change gets: RESOLUTION_ULPS float32 ulps."""
    return RESOLUTION_ULPS * FLOAT32_EPS * max(abs(score), 1.0)


def task_tolerances(task_base: Mapping[str, float], task_envelope: Mapping[str, float] | None,
                    multiple: float) -> dict[str, float]:
    """Per task score, how far an exact or numerical change may move it (absolute, in the score's units): the
    baseline's measured benign spread times the exact envelope multiple, never below the resolution floor."""
    spread = task_envelope or {}
    return {name: max(multiple * spread.get(name, 0.0), resolution_floor(base)) for name, base in task_base.items()}


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    value: float | None
    threshold: float | None
    case: str | None = None
    message: str = ""
    op: str = ">="

    def describe(self) -> str:
        """'metric case X: value (needs op threshold) — message'."""
        where = f" case {self.case}" if self.case else ""
        digits = 4
        while digits < 10 and self.value != self.threshold and \
                _fmt(self.value, digits) == _fmt(self.threshold, digits):  # 17.83 (needs <= 17.83) says nothing
            digits += 2
        return (f"{self.name}{where}: {_fmt(self.value, digits)} (needs {self.op} {_fmt(self.threshold, digits)})"
                + (f" — {self.message}" if self.message else ""))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Check:
        known = {k: data[k] for k in ("value", "threshold", "case", "message", "op") if k in data}
        return cls(str(data.get("name", "")), bool(data.get("passed")), **known)


def _fmt(x: float | None, digits: int = 4) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def _le(name: str, value: float, limit: float, case: str | None, message: str = "") -> Check:
    return Check(name, value <= limit, value, limit, case, message, "<=")


def _ge(name: str, value: float, limit: float, case: str | None, message: str = "") -> Check:
    return Check(name, value >= limit, value, limit, case, message, ">=")


def exact_limits(envelope: dict[str, float], quality: QualityContract) -> dict[str, float]:
    """Envelope x multiple, never tighter than the exact floors, never looser than the numerical gate."""
    t, n = quality.exact, quality.numerical
    m = t.envelope_multiple
    env_mse = mse_from_psnr(envelope.get("psnr_db", math.inf))
    mse_limit = max(m * m * env_mse, mse_from_psnr(t.psnr_floor_db))
    rel = max(m * envelope.get("latent_rel_l2", 0.0), t.latent_rel_l2_floor)
    ssim_loss = max(m * (1 - envelope.get("ssim", 1.0)), t.ssim_loss_floor)
    return {
        "latent_rel_l2": min(rel, n.max_latent_rel_l2),
        "latent_max_abs": max(m * envelope.get("latent_max_abs", 0.0), t.latent_max_abs_floor),
        "psnr_db": max(-10 * math.log10(mse_limit), n.min_psnr_db),
        "ssim": max(1 - ssim_loss, n.min_ssim),
    }


def _floors(t: NumericalGate | ApproximateGate, case: str, fid: dict[str, float]) -> list[Check]:
    """Per-case fidelity floors of one class section (latent, PSNR, SSIM and LPIPS when measured)."""
    checks = [_le("latent_rel_l2", fid["latent_rel_l2"], t.max_latent_rel_l2, case)] \
        if isinstance(t, NumericalGate) else []
    checks += [_ge("psnr_db", fid["psnr_db"], t.min_psnr_db, case),
               _ge("ssim", fid["ssim"], t.min_ssim, case)]
    if "lpips" in fid and t.max_lpips is not None:
        checks.append(_le("lpips", fid["lpips"], t.max_lpips, case))
    return checks


def case_checks(cls: ChangeClass | str, case: str, fid: dict[str, float], quality: QualityContract,
                envelope: dict[str, float], base_pass: bool | None = None,
                cand_pass: bool | None = None, approximate_outputs: bool = False) -> list[Check]:
    """Checks for one corpus case under the gate of class `cls`.

    A quantization whose outputs are also an approximation's (a step cut in it or in the current best)
    gets the approximate fidelity floors instead of the numerical ones; its task gate stays strict."""
    cls = ChangeClass.from_word(cls)
    kept = [Check("task_case_pass", bool(cand_pass), float(bool(cand_pass)), 1.0, case,
                  "the baseline passed this case, so the candidate must too")] if base_pass else []
    if cls is ChangeClass.EXACT:
        lim = exact_limits(envelope, quality)
        msg = "outside the baseline's noise envelope"
        return [_le("latent_rel_l2", fid["latent_rel_l2"], lim["latent_rel_l2"], case, msg),
                _le("latent_max_abs", fid["latent_max_abs"], lim["latent_max_abs"], case, msg),
                _ge("psnr_db", fid["psnr_db"], lim["psnr_db"], case, msg),
                _ge("ssim", fid["ssim"], lim["ssim"], case, msg)] + kept
    if cls in (ChangeClass.NUMERICAL, ChangeClass.QUANTIZATION):
        approx = cls is ChangeClass.QUANTIZATION and approximate_outputs
        return _floors(quality.approximate if approx else quality.numerical, case, fid) + kept
    return _floors(quality.approximate, case, fid)  # ChangeClass.APPROXIMATE


def _score_checks(task_cand: dict[str, float], task_base: dict[str, float],
                  check: Callable[[str, float, float], Check]) -> list[Check]:
    """`check(name, candidate, baseline)` for each task score both sides have; a score one side lacks fails."""
    checks = []
    for name in sorted(set(task_base) | set(task_cand)):
        base, cand = task_base.get(name), task_cand.get(name)
        if base is None or cand is None:
            side = "baseline" if base is None else "candidate"
            checks.append(Check(name, False, cand, base, None, f"the {side}'s score is missing"))
        else:
            checks.append(check(name, cand, base))
    return checks


def _tolerance_checks(task_cand: dict[str, float], task_base: dict[str, float], lower_is_better: set[str],
                      tolerances: Mapping[str, float]) -> list[Check]:
    """Each task score against the baseline's within an absolute tolerance (exact and numerical changes)."""
    def check(name: str, cand: float, base: float) -> Check:
        tol = tolerances.get(name, resolution_floor(base))
        why = f"baseline {base:.9g} +/- {tol:.3g} (the baseline's measured spread x the exact envelope multiple, " \
              f"at least {RESOLUTION_ULPS} float32 ulps)"
        if name in lower_is_better:
            return _le(name, cand, base + tol, None, why)
        return _ge(name, cand, base - tol, None, why)

    return _score_checks(task_cand, task_base, check)


def test_check(result: TestResult) -> Check:
    """A paired task-score test as a check: its one-sided upper bound against its margin, and why, in words."""
    name = result.metric if result.reference == "baseline" else f"{result.metric} vs {result.reference}"
    if not result.looks:
        return Check(name, False, None, result.margin, None, result.reason, "<=")
    look = result.last
    outcome = "non-inferior" if result.passed else result.reason
    condition = f"; {result.condition_text()}" if result.rule is not None else ""
    return Check(name, result.passed, look.upper, result.margin, None,
                 f"degradation {look.estimate:+.4g} against the {result.reference} over {look.n} cases, one-sided "
                 f"bound at level {look.alpha:.2g} (look {len(result.looks)}){condition}; {result.margin_source} "
                 f"{result.margin:.3g}: {outcome}", "<=")


def _missing_scores(task_cand: dict[str, float], task_base: dict[str, float]) -> list[Check]:
    """A task score one side lacks fails (the tests then have nothing to compare)."""
    return [c for c in _score_checks(task_cand, task_base, lambda n, c, b: Check(n, True, c, b)) if not c.passed]


def aggregate_checks(cls: ChangeClass | str, summary: dict[str, Any], quality: QualityContract,
                     task_cand: dict[str, float], task_base: dict[str, float],
                     lower_is_better: set[str], approximate_outputs: bool = False,
                     task_envelope: Mapping[str, float] | None = None,
                     sharpness_change: float | None = None,
                     task_tests: tuple[TestResult, ...] = ()) -> list[Check]:
    """Checks over the whole corpus: mean fidelity floors and task quality for every class.

    Every task metric the lane declares is checked whatever the class: exact and numerical changes may
    move a score by no more than the baseline's own benign variation (`task_envelope`, measured under the
    envelope's perturbations, times the exact envelope multiple; never less than the score's numerical
    resolution, `resolution_floor`); approximate and quantization changes by the paired non-inferiority tests
    `task_tests` (quality_suite/task_tests.py: within the margins, or within the resolution). Approximate
    outputs must also keep the images' fine detail: the mean |log| change of per-case Laplacian energy is
    bounded (blur lowers it, leftover noise raises it), so a blur that flatters a Fréchet distance cannot pass."""
    cls = ChangeClass.from_word(cls)
    checks: list[Check] = []
    if cls in (ChangeClass.EXACT, ChangeClass.NUMERICAL):
        tolerances = task_tolerances(task_base, task_envelope, quality.exact.envelope_multiple)
        checks += _tolerance_checks(task_cand, task_base, lower_is_better, tolerances)
    if sharpness_change is not None and (cls is ChangeClass.APPROXIMATE or approximate_outputs):
        limit = quality.approximate.max_sharpness_change
        checks.append(_le("sharpness_change", sharpness_change, limit, None,
                          "mean |log| change of the images' Laplacian energy against the baseline's"))
    if (cls is ChangeClass.NUMERICAL or (cls is ChangeClass.QUANTIZATION and not approximate_outputs)) and summary:
        t = quality.numerical
        checks += [_ge("mean_psnr_db", summary["psnr_db"]["mean"], t.min_mean_psnr_db, None),
                   _ge("mean_ssim", summary["ssim"]["mean"], t.min_mean_ssim, None)]
    if cls.judged_on_the_task and not task_base and not task_cand:
        claim = "non-inferiority" if cls is ChangeClass.APPROXIMATE else "its tolerance claim"
        checks.append(Check("task_metrics", False, 0.0, 1.0, None, f"the {cls} gate needs task-quality metrics to "
                            f"show {claim}; this lane configures none: set lanes.<lane>.task_metrics, e.g. "
                            "clip_score with quality.clip (dit-ar scaffold --clip-weights PATH)"))
    if cls.judged_on_the_task and (task_base or task_cand):
        checks += _missing_scores(task_cand, task_base)
        gated = [r for r in task_tests if r.gated]
        checks += [test_check(r) for r in gated]
        if not gated:
            why = "did not run" if not task_tests else "did not run: a set metric is reported, not gated; configure " \
                "a per-case task metric (judge_accuracy, clip_score, classifier_top1)"
            checks.append(Check("task_tests", False, None, None, None, f"the {cls} gate's paired task-score tests "
                                + why))
    return checks
