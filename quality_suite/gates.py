"""Quality gates per experiment class (DESIGN §5): pure functions from measurements to checks.

Every check carries the metric, the case, the value and the threshold so that a verdict can say
exactly what failed. Thresholds come from the config's quality contract.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from .metrics import mse_from_psnr


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    value: float | None
    threshold: float | None
    case: str | None = None
    message: str = ""

    def describe(self) -> str:
        where = f" case {self.case}" if self.case else ""
        op = "<=" if self.name.startswith(("latent", "frechet")) or "regression" in self.name else ">="
        return (f"{self.name}{where}: {_fmt(self.value)} (needs {op} {_fmt(self.threshold)})"
                + (f" — {self.message}" if self.message else ""))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.4g}"


def _le(name: str, value: float, limit: float, case: str | None) -> Check:
    return Check(name, value <= limit, value, limit, case)


def _ge(name: str, value: float, limit: float, case: str | None) -> Check:
    return Check(name, value >= limit, value, limit, case)


def exact_limits(envelope: dict[str, float], t: dict[str, Any]) -> dict[str, float]:
    """The exact gate: a multiple of the baseline's measured noise envelope, never tighter than the floors."""
    m = float(t.get("envelope_multiple", 4.0))
    env_mse = mse_from_psnr(envelope.get("psnr_db", math.inf))
    mse_limit = max(m * m * env_mse, mse_from_psnr(float(t.get("psnr_floor_db", 60.0))))
    return {
        "latent_rel_l2": max(m * envelope.get("latent_rel_l2", 0.0), float(t.get("latent_rel_l2_floor", 1e-5))),
        "latent_max_abs": max(m * envelope.get("latent_max_abs", 0.0), float(t.get("latent_max_abs_floor", 1e-4))),
        "psnr_db": -10 * math.log10(mse_limit),
        "ssim": 1 - max(m * (1 - envelope.get("ssim", 1.0)), float(t.get("ssim_loss_floor", 1e-4))),
    }


def case_checks(cls: str, case: str, fid: dict[str, float], quality: dict[str, Any],
                envelope: dict[str, float], base_pass: bool | None = None,
                cand_pass: bool | None = None) -> list[Check]:
    """Checks for one corpus case under the gate of class `cls`."""
    if cls == "exact":
        lim = exact_limits(envelope, quality["exact"])
        return [_le("latent_rel_l2", fid["latent_rel_l2"], lim["latent_rel_l2"], case),
                _le("latent_max_abs", fid["latent_max_abs"], lim["latent_max_abs"], case),
                _ge("psnr_db", fid["psnr_db"], lim["psnr_db"], case),
                _ge("ssim", fid["ssim"], lim["ssim"], case)]
    if cls in ("numerical", "quantization"):
        t = quality["numerical"]
        checks = [_le("latent_rel_l2", fid["latent_rel_l2"], float(t["max_latent_rel_l2"]), case),
                  _ge("psnr_db", fid["psnr_db"], float(t["min_psnr_db"]), case),
                  _ge("ssim", fid["ssim"], float(t["min_ssim"]), case)]
        if cls == "quantization" and base_pass:
            checks.append(Check("task_case_pass", bool(cand_pass), float(bool(cand_pass)), 1.0, case,
                                "the baseline passed this case, so the candidate must too"))
        return checks
    if cls == "approximate":
        t = quality["approximate"]
        return [_ge("psnr_db", fid["psnr_db"], float(t["min_psnr_db"]), case),
                _ge("ssim", fid["ssim"], float(t["min_ssim"]), case)]
    raise ValueError(f"unknown class {cls!r}")


def aggregate_checks(cls: str, summary: dict[str, Any], quality: dict[str, Any],
                     task_cand: dict[str, float], task_base: dict[str, float],
                     lower_is_better: set[str]) -> list[Check]:
    """Checks over the whole corpus: mean fidelity floors and task-quality non-inferiority."""
    checks: list[Check] = []
    if cls in ("numerical", "quantization") and summary:
        t = quality["numerical"]
        checks += [_ge("mean_psnr_db", summary["psnr_db"]["mean"], float(t["min_mean_psnr_db"]), None),
                   _ge("mean_ssim", summary["ssim"]["mean"], float(t["min_mean_ssim"]), None)]
    if cls in ("approximate", "quantization"):
        margins = quality[cls].get("task_margin", {})
        for name, base in task_base.items():
            if name not in task_cand:
                checks.append(Check(name, False, None, base, None, "the candidate's score is missing"))
                continue
            margin = float(margins.get(name, 0.0))
            if name in lower_is_better:  # margins of lower-is-better scores are relative to the baseline
                checks.append(_le(name, task_cand[name], base * (1 + margin) + 1e-12, None))
            else:
                checks.append(_ge(name, task_cand[name], base - margin - 1e-12, None))
    return checks
