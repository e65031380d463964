"""Quality metrics with their libraries: Fréchet (torchmetrics), CLIP (open_clip), LPIPS (torchmetrics), diff PNGs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from scipy import linalg

ROOT = Path(__file__).resolve().parents[2]
from dit_ar_contract.config import ClipSettings, LpipsSettings, load_config  # noqa: E402
from dit_ar_contract.errors import Refused  # noqa: E402
from quality_suite import diff_images, perceptual, task_metrics  # noqa: E402
from quality_suite import judge as J  # noqa: E402
from quality_suite.corpora import Case  # noqa: E402
from quality_suite.frechet import frechet_metric, real_statistics  # noqa: E402

QUALITY = load_config(ROOT / "config" / "autoresearch.json").lanes["embedded-cpu"].quality


def scipy_frechet(mu1: np.ndarray, c1: np.ndarray, mu2: np.ndarray, c2: np.ndarray) -> float:
    """The textbook formula with scipy's matrix square root (independent of torchmetrics)."""
    covmean = np.real(linalg.sqrtm(c1 @ c2))
    return float(((mu1 - mu2) ** 2).sum() + np.trace(c1) + np.trace(c2) - 2 * np.trace(covmean))


@pytest.fixture(scope="module")
def real_digits() -> torch.Tensor:
    from sklearn.datasets import load_digits

    return J.render_digits(load_digits().images[:300]).repeat(1, 3, 1, 1)


@pytest.fixture(scope="module")
def real_features(real_digits: torch.Tensor) -> np.ndarray:
    """The judge's features of the 300 real digits for scipy's side (the first 120 rows are those of the first 120
    digits: an image's features do not depend on its batch, test_judge.py checks it)."""
    return J.load_judge().features(real_digits).double().numpy()


@pytest.mark.filterwarnings("ignore:Matrix is singular")  # some judge ReLU features are always zero on digits
@pytest.mark.parametrize("kind", ["real-300", "real-120", "noise-120"])
def test_frechet_metric_matches_scipy(kind: str, real_digits: torch.Tensor, real_features: np.ndarray) -> None:
    images = {"real-120": real_digits[:120], "real-300": real_digits}.get(kind)
    images = torch.rand(120, 3, 32, 32) if images is None else images
    fid = frechet_metric()
    fid.update(images, real=False)
    value = float(fid.compute())
    feats = {"real-120": real_features[:120], "real-300": real_features}.get(kind)
    feats = J.load_judge().features(images).double().numpy() if feats is None else feats
    mean, cov, count = real_statistics()
    expected = scipy_frechet(mean.numpy(), cov.numpy(), feats.mean(0), np.cov(feats, rowvar=False))
    print(f"\n{kind}: torchmetrics {value:.5f}, scipy {expected:.5f}, real count {count}")
    assert value == pytest.approx(expected, rel=1e-4, abs=1e-3)
    fid.reset()  # the injected real side survives a reset
    assert int(fid.real_features_num_samples) == count == 1797


def test_frechet_task_metric_orders_real_below_noise(real_digits: torch.Tensor) -> None:
    cases = [Case(f"c{i}", "digit", i) for i in range(60)]
    real = {c.id: real_digits[i] for i, c in enumerate(cases)}
    noise = {c.id: torch.rand(3, 32, 32) for c in cases}
    fd_real = task_metrics.compute(["frechet_distance"], real, cases, ROOT, QUALITY)["frechet_distance"].value
    fd_noise = task_metrics.compute(["frechet_distance"], noise, cases, ROOT, QUALITY)["frechet_distance"].value
    assert 5 * fd_real < fd_noise


# -- CLIP --------------------------------------------------------------------------------------

def lane_with(**quality: object) -> SimpleNamespace:
    return SimpleNamespace(name="test-lane", quality=dataclasses.replace(QUALITY, **quality))


def test_clip_without_weights_is_a_setup_error_that_says_how(tmp_path: Path) -> None:
    lane = lane_with(clip=ClipSettings("ViT-B-32", "weights/nowhere.safetensors"))
    with pytest.raises(Refused) as err:
        task_metrics.check_available(["clip_score"], lane.quality, tmp_path)
    text = str(err.value)
    assert "clip_score" in text and "nowhere.safetensors" in text and "does not exist" in text
    assert "open_clip" in text and "quality.clip" in text and "never downloaded" in text
    with pytest.raises(Refused, match="names no CLIP model"):
        task_metrics.check_available(["clip_score"], lane_with(clip=ClipSettings()).quality, tmp_path)
    task_metrics.check_available(["judge_accuracy", "frechet_distance"], lane.quality, ROOT)  # not required: fine


def test_clip_score_from_a_local_file(tmp_path: Path) -> None:
    """A randomly initialised small open_clip model saved locally stands in for real weights."""
    import open_clip
    from safetensors.torch import save_file

    model = open_clip.create_model("ViT-S-32-alt", pretrained=None)
    weights = tmp_path / "clip" / "vit_s32_alt.safetensors"
    weights.parent.mkdir()
    save_file({k: v.half().contiguous() for k, v in model.state_dict().items()}, str(weights))
    lane = lane_with(clip=ClipSettings("ViT-S-32-alt", "clip/vit_s32_alt.safetensors"))
    task_metrics.check_available(["clip_score"], lane.quality, tmp_path)
    cases = [Case(f"c{i}", f"a handwritten digit {i}", i) for i in range(3)]
    images = {c.id: torch.rand(3, 32, 32) for c in cases}
    first = task_metrics.compute(["clip_score"], images, cases, tmp_path, lane.quality)["clip_score"].value
    again = task_metrics.compute(["clip_score"], images, cases, tmp_path, lane.quality)["clip_score"].value
    assert 0.0 <= first <= 100.0 and first == again


# -- LPIPS -------------------------------------------------------------------------------------

def test_lpips_unavailable_is_reported_and_required_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty-torch-home"))
    images = {"a": torch.rand(3, 32, 32)}
    values, status = perceptual.evaluate(images, images, QUALITY)
    assert values is None and status.startswith("unavailable") and "alexnet" in status
    lane = lane_with(lpips=LpipsSettings("alex", required=True))
    with pytest.raises(Refused) as err:
        task_metrics.check_available([], lane.quality, ROOT)
    assert "alexnet-owt" in str(err.value) and "torchvision.models.alexnet" in str(err.value)


def test_lpips_is_computed_when_the_backbone_is_cached(tmp_path: Path, monkeypatch) -> None:
    import torchvision

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    path = perceptual.backbone_file("squeeze")
    path.parent.mkdir(parents=True)
    torch.save(torchvision.models.squeezenet1_1(weights=None).state_dict(), path)  # stand-in weights, offline
    base = {"same": torch.rand(3, 32, 32), "other": torch.rand(3, 32, 32)}
    cand = {"same": base["same"].clone(), "other": torch.rand(3, 32, 32)}
    values, status = perceptual.evaluate(cand, base, dataclasses.replace(QUALITY, lpips=LpipsSettings("squeeze")))
    assert status == "computed with squeeze"
    assert values["same"] == pytest.approx(0.0, abs=1e-6) and values["other"] > 0.01


# -- evidence ----------------------------------------------------------------------------------

def fake_fidelity(ids: list[str]) -> dict[str, dict[str, float]]:
    return {cid: {"latent_rel_l2": 0.01 * i, "latent_max_abs": 0.1 * i, "psnr_db": 60.0 - i, "ssim": 1.0}
            for i, cid in enumerate(ids)}


def test_worst_case_grid_and_case_pngs(tmp_path: Path) -> None:
    ids = [f"case{i}" for i in range(10)]
    base = {cid: torch.rand(3, 32, 32) for cid in ids}
    cand = {cid: (base[cid] + 0.02 * i).clamp(0, 1) for i, cid in enumerate(ids)}
    fid = fake_fidelity(ids)
    assert diff_images.worst_cases(fid) == ["case9", "case8", "case7", "case6", "case5", "case4"]
    diff_images.write(tmp_path / "worst_cases.png", tmp_path / "cases", cand, base, fid)
    grid = Image.open(tmp_path / "worst_cases.png")
    assert grid.height > grid.width  # six rows of three panels
    assert sorted(p.stem for p in (tmp_path / "cases").glob("*.png")) == sorted(ids)
    assert Image.open(tmp_path / "cases" / "case3.png").size == (32, 32)


def test_large_images_store_only_the_worst_cases(tmp_path: Path) -> None:
    ids = [f"case{i}" for i in range(8)]
    big = {cid: torch.rand(3, 300, 300) for cid in ids}
    written = diff_images.case_pngs(big, fake_fidelity(ids), tmp_path / "cases")
    assert sorted(p.stem for p in written) == sorted(diff_images.worst_cases(fake_fidelity(ids)))


def test_batched_float32_ssim_agrees_with_one_float64_call_per_case() -> None:
    from torchmetrics.functional.image import structural_similarity_index_measure

    from quality_suite.metrics import fidelity_batch

    gen = torch.Generator().manual_seed(0)
    base = [torch.rand(3, 64, 64, generator=gen) for _ in range(3)] + [torch.rand(3, 32, 32, generator=gen)]
    cand = [(b + 0.02 * torch.randn(b.shape, generator=gen)).clamp(0, 1) for b in base]
    cand[1] = base[1].clone()  # identical: exactly 1.0 and inf without any SSIM call
    lat = [torch.randn(4, 8, 8, generator=gen) for _ in base]
    got = fidelity_batch(cand, base, lat, lat)
    assert got[1]["ssim"] == 1.0 and got[1]["psnr_db"] == float("inf")
    for c, b, fid in zip(cand, base, got):
        ref = structural_similarity_index_measure(c.double()[None], b.double()[None], data_range=1.0).item()
        assert abs(fid["ssim"] - ref) < 1e-5
    odd = fidelity_batch([torch.rand(3, 8, 8)], [torch.rand(3, 16, 16)], [lat[0]], [lat[0]])[0]
    assert odd["shape_mismatch"] == 1.0 and odd["ssim"] == 0.0
