"""How often one look's one-sided bound passes a change exactly at the margin, for the skewed per-case
degradations of the recorded pool (lab/data/cpu/quality/pool.npz): Student's t (the product's), a studentized
bootstrap and Hall's Edgeworth skewness correction, at 40 and 200 cases drawn without replacement.

    python -m lab.studies.quality_bound_check [--draws 1000] [--data lab/data/cpu/quality/pool.npz]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy import stats

DATA = Path(__file__).resolve().parents[2] / "lab" / "data" / "cpu" / "quality" / "pool.npz"
VARIANTS = ("blend-judge_accuracy-approximate-1", "blend-judge_accuracy-quantization-1")


def t_bound(s: np.ndarray, alpha: float) -> float:
    n = len(s)
    return float(s.mean() + stats.t.ppf(1 - alpha, n - 1) * s.std(ddof=1) / np.sqrt(n))


def studentized_bound(s: np.ndarray, alpha: float, rng: np.random.Generator, resamples: int = 400) -> float:
    n = len(s)
    m, se = s.mean(), s.std(ddof=1) / np.sqrt(n)
    r = s[rng.integers(0, n, (resamples, n))]
    rse = r.std(1, ddof=1) / np.sqrt(n)
    t = (r.mean(1) - m) / np.where(rse > 0, rse, np.inf)
    return float(m - np.quantile(t, alpha) * se)


def hall_bound(s: np.ndarray, alpha: float) -> float:
    n = len(s)
    z, g = stats.norm.ppf(1 - alpha), stats.skew(s, bias=False)
    return float(s.mean() + s.std(ddof=1) / np.sqrt(n) * (z + g * (2 * z * z + 1) / (6 * np.sqrt(n))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args(argv)
    pool = np.load(args.data)
    for v in VARIANTS:
        x = (pool["base|judge_accuracy"] - pool[f"{v}|judge_accuracy"]).astype(np.float64)
        margin = x.mean()  # the blend is calibrated so that the pool's mean degradation is the margin
        print(f"{v}: mean {margin:.4g}, skewness {stats.skew(x):.1f}, 99th percentile {np.percentile(x, 99):.4g}")
        rng = np.random.default_rng(0)
        for n in (40, 200):
            hits = np.zeros(3)
            for _ in range(args.draws):
                s = rng.choice(x, n, replace=False)
                hits += [t_bound(s, 0.05) < margin, studentized_bound(s, 0.05, rng) < margin,
                         hall_bound(s, 0.05) < margin]
            t, boot, hall = 100 * hits / args.draws
            print(f"  {n:>3} cases: passed at the margin: t {t:.1f}%, studentized bootstrap {boot:.1f}%, "
                  f"Hall {hall:.1f}%", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
