"""The retired performance decision for one interleaved block (paired Wilcoxon + bootstrap of the median ratio),
kept for the study that compares it with the sequential test on measured pairs (measured_study). The harness
decides with perf_suite.sequential."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from perf_suite.guardrails import p95


@dataclass(frozen=True)
class BlockStats:
    rounds: int
    best_median_ms: float
    cand_median_ms: float
    best_p95_ms: float
    cand_p95_ms: float
    median_ratio: float          # median over rounds of candidate time / best time (paired per round)
    ci_upper_ratio: float        # one-sided (1 - alpha) bootstrap upper bound of that median
    ci_lower_ratio: float
    improvement_pct: float       # of the primary metric, positive = candidate better
    p_value: float               # one-sided Wilcoxon signed-rank on the paired log ratios (< 0: faster)
    mwu_p_value: float           # one-sided Mann-Whitney U on the unpaired times, for reference
    significant: bool
    passes: bool

    def as_dict(self) -> dict:
        return asdict(self)


def improvement_pct(median_ratio: float, metric: str) -> float:
    """Improvement of the primary metric implied by a candidate/best latency ratio."""
    if metric == "images_per_s":
        return (1.0 / median_ratio - 1.0) * 100.0
    return (1.0 - median_ratio) * 100.0


def bootstrap_median_ci(ratios: np.ndarray, alpha: float, resamples: int, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap of the median ratio: (alpha lower, 1 - alpha upper) one-sided bounds."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(ratios), size=(resamples, len(ratios)))
    medians = np.median(ratios[idx], axis=1)
    return float(np.quantile(medians, alpha)), float(np.quantile(medians, 1 - alpha))


def decide_block(cand_s: list[float], best_s: list[float], *, metric: str, min_improvement_pct: float,
                 alpha: float, resamples: int) -> BlockStats:
    """Judge one block of paired rounds (same seeds, same time window) of candidate and best."""
    if len(cand_s) != len(best_s) or len(cand_s) < 3:
        raise ValueError("need at least 3 paired rounds of equal length")
    cand, best = np.asarray(cand_s, dtype=float), np.asarray(best_s, dtype=float)
    ratios = cand / best
    median_ratio = float(np.median(ratios))
    lo, hi = bootstrap_median_ci(ratios, alpha, resamples)
    # Rounds are paired (same seeds, adjacent in time), so the paired test is the primary one: a burst
    # of noise that slows both sides of a round cancels in the ratio but not in an unpaired test.
    from scipy.stats import mannwhitneyu, wilcoxon  # here: scipy.stats costs every harness ~1 s of import

    p = float(wilcoxon(np.log(ratios), alternative="less").pvalue) if np.any(ratios != 1.0) else 1.0
    mwu = float(mannwhitneyu(cand, best, alternative="less").pvalue)
    significant = p < alpha and hi < 1.0
    gain = improvement_pct(median_ratio, metric)
    return BlockStats(
        rounds=len(cand), best_median_ms=float(np.median(best)) * 1e3, cand_median_ms=float(np.median(cand)) * 1e3,
        best_p95_ms=p95(best_s) * 1e3, cand_p95_ms=p95(cand_s) * 1e3, median_ratio=median_ratio,
        ci_upper_ratio=hi, ci_lower_ratio=lo, improvement_pct=gain, p_value=p, mwu_p_value=mwu, significant=significant,
        passes=significant and gain >= min_improvement_pct,
    )
