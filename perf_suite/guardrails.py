"""Guardrails a faster candidate must still respect (pure functions): the whole-run peak memory against an
absolute budget, the steady peak (after warm-up) against the best's, the WARM start-up (build plus warm-up of a
worker whose compile cache is filled) against an absolute budget, and tail latency (paired with the best's over
the same rounds). The start-up's growth over the best's and the cold compile (the tree's first worker) are
reported, never a verdict by themselves: a compiled candidate pays its compile once per tree, after which every
worker of the tree starts from the harness's compile cache (worker/compile_cache.py).

The relative limits carry a small absolute slack so that noise in small figures (a CPU lane's resident set, a
sub-second build) cannot discard a candidate that did not change them."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

import numpy as np

MEMORY_SLACK_MB = 64.0
STARTUP_SLACK_S = 2.0
MIN_SAMPLES_FOR_P95 = 20  # fewer samples make a p95 the maximum, which one burst of noise decides
TAIL_RESAMPLES = 2000  # bootstrap resamples of the paired rounds (tail_ratio_bound)
TAIL_CONFIDENCE = 0.95  # the tail regresses only when the lower bound of the p95 ratio at this level is beyond it


def p95(values: list[float]) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), 95))


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


def memory_growth(cand_steady_mb: float | None, best_steady_mb: float | None,
                  growth_pct: float | None) -> GuardrailResult:
    """The candidate's steady peak memory (sampled by the harness from the end of warm-up to the end of timing)
    against the best's plus `growth_pct` percent (and MEMORY_SLACK_MB). A first generate's transient (a compile,
    a graph capture) is not judged here: the absolute budget (`memory`) judges the whole-run peak."""
    if growth_pct is None or cand_steady_mb is None or best_steady_mb is None:
        return GuardrailResult(None, {})
    limit = best_steady_mb * (1 + growth_pct / 100) + MEMORY_SLACK_MB
    figures = {"cand_steady_mb": cand_steady_mb, "best_steady_mb": best_steady_mb, "memory_limit_mb": limit,
               "memory_growth_pct": 100 * (cand_steady_mb / best_steady_mb - 1)}
    if cand_steady_mb > limit:
        return GuardrailResult(f"steady peak memory (after warm-up) {cand_steady_mb:.0f} MB grew beyond {limit:.0f} "
                               f"MB (best {best_steady_mb:.0f} MB + {growth_pct:g}% + {MEMORY_SLACK_MB:g} MB)",
                               figures)
    return GuardrailResult(None, figures)


def startup_growth(cand_s: list[float], best_s: list[float], growth_pct: float | None) -> GuardrailResult:
    """Reported only: the candidate's warm start-up (build plus warm-up rounds, per fresh worker; median) against
    the best's, and whether it grew beyond `growth_pct` percent (and STARTUP_SLACK_S). Never a problem."""
    if not cand_s or not best_s:
        return GuardrailResult(None, {})
    cand, best = float(median(cand_s)), float(median(best_s))
    figures: dict[str, float | str | None] = {"cand_startup_s": cand, "best_startup_s": best,
                                              "startup_growth_pct": 100 * (cand / best - 1) if best > 0 else None}
    if growth_pct is not None:
        figures["startup_limit_s"] = best * (1 + growth_pct / 100) + STARTUP_SLACK_S
        figures["startup_grew"] = "yes" if cand > figures["startup_limit_s"] else "no"
    return GuardrailResult(None, figures)


def startup_budget(warm_cand_s: list[float], budget_s: float | None) -> GuardrailResult:
    """The candidate's warm start-up (median over its fresh workers that found their compile cache filled)
    against an absolute budget in seconds (absent budget or no warm worker: not checked)."""
    if budget_s is None or not warm_cand_s:
        return GuardrailResult(None, {"startup_budget_s": budget_s})
    cand = float(median(warm_cand_s))
    figures = {"cand_warm_startup_s": cand, "startup_budget_s": budget_s}
    if cand > budget_s:
        return GuardrailResult(f"warm start-up (build + warm-up, compile cache filled) {cand:.1f} s exceeds the "
                               f"lane's budget {budget_s:g} s (guardrails.startup_budget_s)", figures)
    return GuardrailResult(None, figures)


def tail_ratio_bound(cand_by_segment: list[list[float]], best_by_segment: list[list[float]],
                     resamples: int = TAIL_RESAMPLES, confidence: float = TAIL_CONFIDENCE, seed: int = 0) -> float:
    """A one-sided lower confidence bound of p95(candidate) / p95(best) by a paired bootstrap: rounds are resampled
    within each segment with both sides' times of a round kept together, so load that a round's two sides shared
    moves both tails alike and only a difference of the sides' own tails remains."""
    rng = np.random.default_rng(seed)
    cand_parts, best_parts = [], []
    for cand, best in zip(cand_by_segment, best_by_segment):
        c, b = np.asarray(cand, dtype=float), np.asarray(best, dtype=float)
        idx = rng.integers(0, len(c), size=(resamples, len(c)))
        cand_parts.append(c[idx])
        best_parts.append(b[idx])
    ratios = np.percentile(np.hstack(cand_parts), 95, axis=1) / np.percentile(np.hstack(best_parts), 95, axis=1)
    return float(np.quantile(ratios, 1 - confidence))


def tail_latency(cand_by_segment: list[list[float]], best_by_segment: list[list[float]],
                 tolerance_pct: float | None) -> GuardrailResult:
    """The candidate's p95 against the best's p95 plus a tolerance, paired: judged by the lower bound of their
    ratio over the same alternating rounds (`tail_ratio_bound`), not by the point estimate, whose p95 of a few
    dozen rounds is decided by two or three of them (one load spike on one side flips it)."""
    if tolerance_pct is None:
        return GuardrailResult(None, {})
    segments = [(c, b) for c, b in zip(cand_by_segment, best_by_segment) if c and len(c) == len(b)]
    cand = [t for c, _ in segments for t in c]
    best = [t for _, b in segments for t in b]
    if len(cand) < MIN_SAMPLES_FOR_P95:
        return GuardrailResult(None, {"p95": f"not judged: {len(cand)} samples < {MIN_SAMPLES_FOR_P95} "
                                             "(a p95 of fewer is the maximum)"})
    cand_p95, best_p95 = p95(cand) * 1e3, p95(best) * 1e3
    limit = 1 + tolerance_pct / 100
    lower = tail_ratio_bound([c for c, _ in segments], [b for _, b in segments])
    figures = {"cand_p95_ms": cand_p95, "best_p95_ms": best_p95, "p95_limit_ms": best_p95 * limit,
               "p95_ratio": cand_p95 / best_p95, "p95_ratio_lower": lower}
    if lower > limit:
        return GuardrailResult(f"p95 {cand_p95:.1f} ms against the best's {best_p95:.1f} ms in the same "
                               f"{len(cand)} rounds: longer by at least {100 * (lower - 1):.1f}% "
                               f"({TAIL_CONFIDENCE:.0%} bound, rounds resampled in pairs), beyond the tolerance of "
                               f"{tolerance_pct:g}%", figures)
    return GuardrailResult(None, figures)
