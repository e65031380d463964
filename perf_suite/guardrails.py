"""Guardrails a faster candidate must still respect: peak memory and tail latency (pure functions)."""

from __future__ import annotations

from dataclasses import dataclass

from .stats import p95

MIN_SAMPLES_FOR_P95 = 20  # fewer samples make a p95 the maximum, which one burst of noise decides


@dataclass(frozen=True)
class GuardrailResult:
    problem: str | None
    figures: dict[str, float | str | None]


def memory(cand_peak_mb: float | None, best_peak_mb: float | None, budget_mb: float | None) -> GuardrailResult:
    """The candidate's peak memory against an absolute budget (absent budget: not checked)."""
    figures = {"cand_peak_mb": cand_peak_mb, "best_peak_mb": best_peak_mb, "budget_mb": budget_mb}
    if budget_mb is not None and cand_peak_mb is not None and cand_peak_mb > budget_mb:
        return GuardrailResult(f"peak memory {cand_peak_mb:.0f} MB exceeds the budget {budget_mb:.0f} MB", figures)
    return GuardrailResult(None, figures)


def tail_latency(cand_s: list[float], best_s: list[float], tolerance_pct: float | None) -> GuardrailResult:
    """The candidate's p95 over all samples against the best's p95 plus a tolerance."""
    if tolerance_pct is None:
        return GuardrailResult(None, {})
    if len(cand_s) < MIN_SAMPLES_FOR_P95:
        return GuardrailResult(None, {"p95": f"not judged: {len(cand_s)} samples < {MIN_SAMPLES_FOR_P95} "
                                             "(a p95 of fewer is the maximum)"})
    cand_p95, best_p95 = p95(cand_s) * 1e3, p95(best_s) * 1e3
    limit = best_p95 * (1 + tolerance_pct / 100)
    figures = {"cand_p95_ms": cand_p95, "best_p95_ms": best_p95, "p95_limit_ms": limit}
    if cand_p95 > limit:
        return GuardrailResult(f"p95 {cand_p95:.1f} ms regressed beyond {limit:.1f} ms (best p95 "
                               f"{best_p95:.1f} ms + {tolerance_pct:g}%)", figures)
    return GuardrailResult(None, figures)
