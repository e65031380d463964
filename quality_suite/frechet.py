"""Fréchet distance on the digit judge's features: torchmetrics FID with the real side preloaded."""

from __future__ import annotations

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
