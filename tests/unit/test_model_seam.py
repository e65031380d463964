"""The seam between the fixed harness and model_under_test (CPU, embedded preset)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import model_under_test  # noqa: E402
from dit_ar_contract.config import load_config  # noqa: E402
from model_under_test.checkpoints import MissingWeightsError, save_local_folder  # noqa: E402
from model_under_test.pipeline import initial_noise  # noqa: E402
from model_under_test.prompts import parse_digit  # noqa: E402

# the embedded lane's spec, as the harness hands it over; 4 sampling steps keep the tier fast (what is checked
# here, shapes, determinism and batching, does not depend on the step count)
SPEC = dict(load_config(ROOT / "config" / "autoresearch.json").lanes["embedded-cpu"].workload(ROOT), steps=4, batch=8)
BATCH = [("a handwritten digit seven", 11), ("3", 12), ("nine", 13), ("the digit 0", 14),
         ("handwritten four", 15), ("a handwritten digit two", 16), ("5", 17), ("eight", 18)]


@pytest.fixture(scope="module")
def pipe():
    return model_under_test.build_pipeline(SPEC)


@pytest.fixture(scope="module")
def batch_result(pipe):
    return pipe.generate(BATCH)


def test_seam_contract(pipe, batch_result):
    images, latents = batch_result.images, batch_result.latents
    assert images.shape == (8, 3, 32, 32)
    assert images.dtype == torch.float32
    assert float(images.min()) >= 0.0 and float(images.max()) <= 1.0
    assert torch.isfinite(images).all() and torch.isfinite(latents).all()
    assert latents.shape == (8, 1, 16, 16)
    comps = pipe.components
    assert isinstance(comps["transformer"], torch.nn.Module)
    assert all(isinstance(m, torch.nn.Module) for m in comps.values())
    assert type(comps["transformer"]).__name__ == "DiTTransformer2DModel"


def test_resolution_follows_spec():
    pipe = model_under_test.build_pipeline(dict(SPEC, resolution=48, steps=2))
    assert pipe.generate([("1", 0)]).images.shape == (1, 3, 48, 48)


def test_stage_names_are_recorded():
    pipe = model_under_test.build_pipeline(dict(SPEC, steps=2))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        pipe.generate([("7", 1)])
    names = {e.key for e in prof.key_averages()}
    assert {"text_encode", "denoise", "decode"} <= names


def test_repeatable_in_process(pipe, batch_result):
    again = pipe.generate(BATCH)
    assert torch.equal(again.images, batch_result.images)
    assert torch.equal(again.latents, batch_result.latents)


def test_initial_noise_independent_of_batch():
    shape = (1, 16, 16)
    together = initial_noise([5, 6, 7], shape, "cpu")
    assert torch.equal(together[1], initial_noise([6], shape, "cpu")[0])
    assert not torch.equal(together[0], together[1])


def test_request_alone_matches_batch(pipe, batch_result):
    # The initial noise is bit-identical (above). The denoiser's small-batch matrix
    # products (e.g. the [N, 96] conditioning MLPs) take different CPU GEMM kernels for
    # different N, so the outputs agree to float rounding rather than bit for bit.
    for index in (0, 5):
        alone = pipe.generate([BATCH[index]])
        diff = (alone.images[0] - batch_result.images[index]).abs().max().item()
        assert diff < 1e-4, f"request {BATCH[index]} differs by {diff} alone vs in a batch"
        lat = (alone.latents[0] - batch_result.latents[index]).abs().max().item()
        assert lat < 1e-4


def test_different_seeds_differ(pipe):
    out = pipe.generate([("7", 1), ("7", 2)])
    assert not torch.equal(out.images[0], out.images[1])


def test_unknown_preset():
    with pytest.raises(ValueError) as err:
        model_under_test.build_pipeline(dict(SPEC, preset="sdxl-turbo"))
    for name in model_under_test.PRESETS:
        assert name in str(err.value)


def test_missing_weights_folder(tmp_path):
    with pytest.raises(MissingWeightsError, match="needs the lane's 'weights'"):
        model_under_test.build_pipeline(dict(SPEC, weights=None))
    with pytest.raises(MissingWeightsError) as err:
        model_under_test.build_pipeline(dict(SPEC, weights=str(tmp_path / "nowhere")))
    assert isinstance(err.value, FileNotFoundError)
    assert "never download" in str(err.value)
    with pytest.raises(FileNotFoundError, match="model_index.json"):
        model_under_test.build_pipeline(dict(SPEC, weights=str(tmp_path)))
    (tmp_path / "model_index.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"transformer[/\\]config.json"):
        model_under_test.build_pipeline(dict(SPEC, weights=str(tmp_path)))
    with pytest.raises(MissingWeightsError, match="does not exist"):
        model_under_test.build_pipeline(dict(SPEC, preset="dit-xl-2-256", weights="relative/missing"))
    for sub, name in (("transformer", "config.json"), ("scheduler", "scheduler_config.json")):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / name).write_text("{}")
    with pytest.raises(MissingWeightsError, match=r"vae[/\\]config.json"):
        model_under_test.build_pipeline(dict(SPEC, preset="dit-xl-2-256", weights=str(tmp_path)))


def test_local_diffusers_folder_roundtrip(pipe, tmp_path):
    folder = save_local_folder(pipe, tmp_path / "digits")
    assert (folder / "model_index.json").is_file()
    # a relative weights path resolves against spec["root"]
    loaded = model_under_test.build_pipeline(dict(SPEC, root=str(tmp_path), weights="digits", steps=5))
    fresh = model_under_test.build_pipeline(dict(SPEC, steps=5))
    a, b = loaded.generate(BATCH[:2]), fresh.generate(BATCH[:2])
    assert torch.equal(a.images, b.images)


def test_digit_prompts():
    assert parse_digit("a handwritten digit seven") == 7
    assert parse_digit("7") == 7
    assert parse_digit("Seven") == 7
    assert parse_digit("the digit 0") == 0
    with pytest.raises(ValueError):
        parse_digit("someone")  # 'one' inside a word is not a digit
    assert parse_digit("") is None
    with pytest.raises(ValueError):
        parse_digit("digits 3 and 4")


def test_images_differ_by_prompt(pipe):
    out = pipe.generate([("1", 3), ("8", 3)])
    assert hashlib.sha256(out.images[0].numpy().tobytes()).digest() != \
        hashlib.sha256(out.images[1].numpy().tobytes()).digest()
