"""The numerical gate of config/autoresearch.json applied to two generates' outputs, one case an image (the
gate's own checks: quality_suite.gates), for tests that compare two models of the same lane."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def numerical_gate_failures(got: Any, want: Any, lane: str = "dit-xl2-256") -> list[str]:
    """The failed checks of `got` (a GenerationResult) against `want` under the lane's numerical gate."""
    from dit_ar_contract.config import load_config
    from quality_suite import gates, metrics

    quality = load_config(ROOT / "config" / "autoresearch.json").lanes[lane].quality
    fids = metrics.fidelity_batch(list(got.images), list(want.images), list(got.latents), list(want.latents))
    per_case = {f"image {i}": fid for i, fid in enumerate(fids)}
    checks = [c for case, fid in per_case.items() for c in gates.case_checks("numerical", case, fid, quality, {})]
    checks += gates.aggregate_checks("numerical", metrics.summarize(per_case), quality, {}, {}, set())
    return [c.describe() for c in checks if not c.passed]


def worst_psnr_db(got: Any, want: Any) -> float:
    from quality_suite import metrics

    fids = metrics.fidelity_batch(list(got.images), list(want.images), list(got.latents), list(want.latents))
    return min(fid["psnr_db"] for fid in fids)
