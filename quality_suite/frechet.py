"""Fréchet distance on the digit judge's features: torchmetrics FID with the real side preloaded, and the same
distance computed from per-case feature rows in batches (`frechet_of_features`, the paired bootstrap's statistic)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn
from torchmetrics.image.fid import FrechetInceptionDistance

from .judge import FEATURE_DIM, JUDGE_DIR, STATS_NAME, Judge, load_judge


class JudgeFeatures(nn.Module):
    """The judge's 64-d penultimate activations as a torchmetrics feature extractor."""

    num_features = FEATURE_DIM

    def __init__(self, judge: Judge) -> None:
        super().__init__()
        self.judge = judge
        self.net = judge.net  # registered so that .to()/.eval() on the metric reach the weights

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Images [N, C, H, W] in [0, 1] -> features [N, 64] (float32, on the images' device)."""
        return self.judge.features(images).clone().to(images.device)


def real_statistics() -> tuple[torch.Tensor, torch.Tensor, int]:
    """(mean [64], covariance [64, 64], count) of the real digits' judge features, float64."""
    path = JUDGE_DIR / STATS_NAME
    if not path.is_file():
        raise FileNotFoundError(f"real-digit feature statistics expected at {path}")
    stats = load_file(str(path))
    return stats["mean"].double(), stats["cov"].double(), int(stats["count"].item())


def inject_real(fid: FrechetInceptionDistance, mean: torch.Tensor, cov: torch.Tensor, count: int) -> None:
    """Write (mean, unbiased covariance, count) into the metric's running real-feature sums."""
    fid.real_features_sum = mean * count
    fid.real_features_cov_sum = (count - 1) * cov + count * torch.outer(mean, mean)
    fid.real_features_num_samples = torch.tensor(count, dtype=torch.long)


def frechet_metric() -> FrechetInceptionDistance:
    """A FrechetInceptionDistance on judge features whose real side comes from real_stats.safetensors.

    Call ``update(generated, real=False)`` then ``compute()``; ``reset()`` keeps the real side.
    """
    fid = FrechetInceptionDistance(feature=JudgeFeatures(load_judge()), reset_real_features=False,
                                   normalize=True)
    inject_real(fid, *real_statistics())
    return fid


def judge_features(images: torch.Tensor) -> np.ndarray:
    """The judge's 64-d features of images [N, C, H, W] in [0, 1], one float64 row per image."""
    return load_judge().features(images).double().numpy()


@lru_cache(maxsize=1)
def _real_side() -> tuple[np.ndarray, np.ndarray, float]:
    """(mean, symmetric square root of the covariance, trace of the covariance) of the real digits' features."""
    mean, cov, _ = real_statistics()
    w, v = np.linalg.eigh(cov.numpy())
    return mean.numpy(), (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T, float(np.trace(cov.numpy()))


def frechet_of_features(rows: np.ndarray) -> np.ndarray:
    """The Fréchet distance of each set of generated feature rows [B, n, d] (or one set [n, d]) to the real digits.

    ||mu - mu_r||^2 + tr(C) + tr(C_r) - 2 tr((C_r^1/2 C C_r^1/2)^1/2), C the unbiased covariance of the n rows: the
    trace of the square root is the sum of the singular values of (rows - mu) C_r^1/2 over sqrt(n - 1). This is
    the value torchmetrics' FrechetInceptionDistance gives for the same features (tests/unit/test_noninferiority.py),
    for B resamples at once."""
    mu_r, root, tr_r = _real_side()
    x = np.asarray(rows, np.float64)
    one = x.ndim == 2
    x = x[None] if one else x
    n, d = x.shape[-2], x.shape[-1]
    mu = x.mean(axis=-2)
    centred = x - mu[:, None, :]
    y = centred @ root
    gram = y @ np.swapaxes(y, -1, -2) if n <= d else np.swapaxes(y, -1, -2) @ y
    tr_sqrt = np.sqrt(np.clip(np.linalg.eigvalsh(gram), 0.0, None)).sum(axis=-1) / np.sqrt(max(n - 1, 1))
    tr_c = (centred ** 2).sum(axis=(-2, -1)) / max(n - 1, 1)
    out = ((mu - mu_r) ** 2).sum(axis=-1) + tr_c + tr_r - 2 * tr_sqrt
    return out[0:1] if one else out
