"""The digit judge: a small CNN that scores the embedded model's images (FIXED side).

``load_judge()`` returns a ``Judge`` with

* ``predict(images) -> LongTensor[N]``: the digit class of each image;
* ``features(images) -> FloatTensor[N, 64]``: penultimate-layer activations, for a
  Fréchet distance against ``load_real_stats()`` (mean and covariance of the
  features of all 1,797 real digits); ``quality_suite.frechet.frechet_metric`` wraps
  them in torchmetrics' ``FrechetInceptionDistance``.

``images`` is a float tensor [N, 3, H, W] (or [N, 1, H, W]) in [0, 1] on any device and
at any size: it is converted to gray and resized with antialiasing to the judge's
32x32 input. Real digits are rendered for the judge exactly the way the embedded model
decodes: 8x8 -> 16x16 -> 32x32, bilinear. The judge was trained by
``quality_suite/judge/train.py`` on a seeded stratified split of scikit-learn's
digits; ``heldout_split`` rebuilds that split so its accuracy can be re-checked.

Nothing here imports ``model_under_test``: the judge never trusts the code it judges.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..judge_files import JUDGE_DIR, STATS_NAME, WEIGHTS_NAME  # noqa: F401 - one place for the file names

INPUT_SIZE = 32
FEATURE_DIM = 64
NUM_CLASSES = 10
HELDOUT_FRACTION = 0.25
SPLIT_SEED = 0
_LUMA = (0.299, 0.587, 0.114)


class DigitCNN(nn.Module):
    """conv(32)x2 -> pool -> conv(64)x2 -> pool -> conv(64) -> pool -> fc(64) -> fc(10)."""

    def __init__(self) -> None:
        super().__init__()

        def block(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

        self.body = nn.Sequential(
            *block(1, 32), *block(32, 32), nn.MaxPool2d(2),  # 16x16
            *block(32, 64), *block(64, 64), nn.MaxPool2d(2),  # 8x8
            *block(64, 64), nn.MaxPool2d(2),  # 4x4
            nn.Flatten(),
            nn.Linear(64 * 4 * 4, FEATURE_DIM), nn.ReLU(inplace=True),
        )
        self.head = nn.Linear(FEATURE_DIM, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def render_digits(images_8x8) -> torch.Tensor:
    """sklearn digits (values 0..16, [N, 8, 8]) -> [N, 1, 32, 32] in [0, 1], as decoded."""
    x = torch.as_tensor(np.asarray(images_8x8), dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    x = F.interpolate(x, size=(16, 16), mode="bilinear", align_corners=False)
    return F.interpolate(x, size=(INPUT_SIZE, INPUT_SIZE), mode="bilinear", align_corners=False).clamp(0, 1)


def to_gray_input(images: torch.Tensor) -> torch.Tensor:
    """[N, C, H, W] in [0, 1] -> [N, 1, 32, 32] gray in [0, 1] (CPU float32)."""
    x = images.detach().to("cpu", torch.float32)
    if x.ndim == 3:
        x = x.unsqueeze(1)
    if x.ndim != 4:
        raise ValueError(f"judge expects images [N, C, H, W], got shape {tuple(images.shape)}")
    if x.shape[1] == 3:
        w = torch.tensor(_LUMA).view(1, 3, 1, 1)
        x = (x * w).sum(1, keepdim=True)
    elif x.shape[1] != 1:
        x = x.mean(1, keepdim=True)
    if tuple(x.shape[-2:]) != (INPUT_SIZE, INPUT_SIZE):
        x = F.interpolate(x, size=(INPUT_SIZE, INPUT_SIZE), mode="bilinear", align_corners=False, antialias=True)
    return x.clamp(0, 1)


def normalize(gray: torch.Tensor) -> torch.Tensor:
    return (gray - 0.5) / 0.5


# Images per forward pass: a batch's activations (64 x 32 channels x 32 x 32 floats, 8 MB) stay in the CPU's cache,
# which 512 did not; every image's outputs are bit-identical at any batch size (checked on all 1,797 real digits).
BATCH = 64


class Judge:
    def __init__(self, net: DigitCNN, meta: dict | None = None) -> None:
        self.net = net.eval()
        self.meta = dict(meta or {})

    @torch.inference_mode()
    def logits(self, images: torch.Tensor, batch: int = BATCH) -> torch.Tensor:
        x = normalize(to_gray_input(images))
        return torch.cat([self.net(x[i : i + batch]) for i in range(0, len(x), batch)]) if len(x) else \
            torch.zeros(0, NUM_CLASSES)

    def predict(self, images: torch.Tensor) -> torch.Tensor:
        return self.logits(images).argmax(1).long()

    @torch.inference_mode()
    def features(self, images: torch.Tensor, batch: int = BATCH) -> torch.Tensor:
        x = normalize(to_gray_input(images))
        if not len(x):
            return torch.zeros(0, FEATURE_DIM)
        return torch.cat([self.net.body(x[i : i + batch]) for i in range(0, len(x), batch)]).float()


def load_judge() -> Judge:
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = JUDGE_DIR / WEIGHTS_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"judge weights expected at {path}; they ship with the package "
            "(regenerate with: python -m quality_suite.judge.train)"
        )
    net = DigitCNN()
    net.load_state_dict(load_file(str(path)))
    net.requires_grad_(False)
    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata() or {}
    return Judge(net, meta)


def load_real_stats() -> tuple[torch.Tensor, torch.Tensor]:
    """(mean [64], covariance [64, 64]) of judge features of the real digits, float64."""
    from safetensors.torch import load_file

    path = JUDGE_DIR / STATS_NAME
    if not path.is_file():
        raise FileNotFoundError(f"real-digit feature statistics expected at {path}")
    stats = load_file(str(path))
    return stats["mean"].double(), stats["cov"].double()


def feature_stats(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    f = features.double()
    mean = f.mean(0)
    centered = f - mean
    cov = centered.T @ centered / max(1, len(f) - 1)
    return mean, cov


def frechet_distance(mu1, cov1, mu2, cov2) -> float:
    """||mu1 - mu2||^2 + Tr(C1 + C2 - 2 (C1 C2)^1/2), as in FID.

    Tr((C1 C2)^1/2) is the sum of the square roots of the eigenvalues of C1 C2 (the
    same formula torchmetrics uses), which stays defined when a covariance is singular
    (some ReLU features of the judge are always zero on digits).
    """
    mu1, mu2 = np.asarray(mu1, np.float64), np.asarray(mu2, np.float64)
    cov1, cov2 = np.asarray(cov1, np.float64), np.asarray(cov2, np.float64)
    eig = np.linalg.eigvals(cov1 @ cov2)
    tr_covmean = np.sqrt(np.clip(eig.real, 0, None)).sum()
    diff = mu1 - mu2
    return float(diff @ diff + np.trace(cov1) + np.trace(cov2) - 2 * tr_covmean)


def heldout_split() -> tuple[np.ndarray, np.ndarray]:
    """(train indices, held-out indices) into ``load_digits()``: stratified, 25 %, seed 0."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    y = load_digits().target
    idx = np.arange(len(y))
    train, test = train_test_split(idx, test_size=HELDOUT_FRACTION, random_state=SPLIT_SEED, stratify=y)
    return np.sort(train), np.sort(test)


def heldout_accuracy(judge: Judge) -> float:
    from sklearn.datasets import load_digits

    data = load_digits()
    _, test = heldout_split()
    pred = judge.predict(render_digits(data.images[test]))
    return float((pred.numpy() == data.target[test]).mean())
