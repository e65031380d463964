"""The digit judge, and the embedded baseline's task quality as the judge sees it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from quality_suite import judge as J

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def judge():
    return J.load_judge()


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    return load_digits()


def test_heldout_accuracy(judge):
    train, test = J.heldout_split()
    assert len(test) == 450 and len(set(train) & set(test)) == 0
    acc = J.heldout_accuracy(judge)
    print(f"\njudge held-out accuracy: {acc:.4f} on {len(test)} digits (recorded {judge.meta.get('heldout_accuracy')})")
    assert acc >= 0.97


def test_any_size_and_channels(judge, digits):
    _, test = J.heldout_split()
    real = J.render_digits(digits.images[test[:200]])  # [N, 1, 32, 32]
    want = torch.tensor(digits.target[test[:200]])
    rgb = real.repeat(1, 3, 1, 1)
    big = F.interpolate(rgb, size=(128, 128), mode="bilinear", align_corners=False)
    small = F.interpolate(rgb, size=(24, 24), mode="bilinear", align_corners=False, antialias=True)
    for images in (rgb, big, small, real):
        pred = judge.predict(images)
        assert pred.dtype == torch.long and pred.shape == (200,)
        assert (pred == want).float().mean() >= 0.95
    feats = judge.features(big)
    assert feats.shape == (200, J.FEATURE_DIM) and feats.dtype == torch.float32
    assert torch.equal(judge.features(big[:20], batch=7), feats[:20])  # an image's features ignore its batch
    assert torch.equal(judge.logits(real[:20], batch=7), judge.logits(real)[:20])


def test_real_stats(judge, digits):
    mean, cov = J.load_real_stats()
    assert mean.shape == (J.FEATURE_DIM,) and cov.shape == (J.FEATURE_DIM, J.FEATURE_DIM)
    assert torch.allclose(cov, cov.T)
    m2, c2 = J.feature_stats(judge.features(J.render_digits(digits.images)))
    assert J.frechet_distance(mean, cov, m2, c2) < 1e-3
    # uniform-noise images are far from the real statistics
    noise = torch.rand(300, 3, 32, 32)
    m3, c3 = J.feature_stats(judge.features(noise))
    assert J.frechet_distance(mean, cov, m3, c3) > 1.0
