"""GPU presets on the meta device and small CPU forwards, held to the published sizes of tests/helpers/presets.py."""

from __future__ import annotations

import sys

import pytest
import torch

from tests.helpers.presets import DIT_SPEC, PIXART_SPEC, ROOT, n_params, reduced_forward, within

if str(ROOT) not in sys.path:  # the mutable package is imported from the project root
    sys.path.insert(0, str(ROOT))

import model_under_test  # noqa: E402
from model_under_test.presets import dit_parameter_count  # noqa: E402
from model_under_test.prompts import HashTokenizer, parse_imagenet_class  # noqa: E402


def test_dit_xl2_full_size_on_meta():
    pipe = model_under_test.build_pipeline(dict(DIT_SPEC, device="meta"))
    tr = pipe.components["transformer"]
    assert all(p.device.type == "meta" for p in tr.parameters())
    cfg = tr.config
    assert (cfg.num_layers, cfg.num_attention_heads, cfg.attention_head_dim, cfg.patch_size) == (28, 16, 72, 2)
    assert (cfg.sample_size, cfg.in_channels, cfg.out_channels, cfg.num_embeds_ada_norm) == (32, 4, 8, 1000)
    dedup = dit_parameter_count(tr)
    assert within(dedup, 675e6), dedup
    assert dit_parameter_count(tr, dedup=False) > 740e6  # the duplicated embedders
    vae = pipe.components["vae"]
    assert list(vae.config.block_out_channels) == [128, 256, 512, 512]
    assert vae.config.scaling_factor == pytest.approx(0.18215)
    assert within(n_params(vae), 83.65e6, 0.01)  # SD VAE (sd-vae-ft-ema) size
    assert type(pipe.scheduler).__name__ == "DDIMScheduler"
    print(f"\nDiT-XL/2: {dedup / 1e6:.2f}M (embedder counted once), "
          f"{n_params(tr) / 1e6:.2f}M raw in diffusers, VAE {n_params(vae) / 1e6:.2f}M")


def test_pixart_sigma_full_size_on_meta():
    pipe = model_under_test.build_pipeline(dict(PIXART_SPEC, device="meta"))
    comps = pipe.components
    assert set(comps) == {"transformer", "vae", "text_encoder"}
    tr, te = comps["transformer"], comps["text_encoder"]
    assert all(p.device.type == "meta" for m in comps.values() for p in m.parameters())
    cfg = tr.config
    width = cfg.num_attention_heads * cfg.attention_head_dim
    assert (cfg.num_layers, width, cfg.cross_attention_dim) == (28, 1152, 1152)
    assert (cfg.caption_channels, cfg.sample_size, cfg.patch_size, cfg.norm_type) == (4096, 128, 2, "ada_norm_single")
    assert within(n_params(tr), 0.6e9), n_params(tr)
    t5 = te.config
    assert (t5.d_model, t5.num_layers, t5.d_ff, t5.num_heads, t5.vocab_size) == (4096, 24, 10240, 64, 32128)
    assert 4.6e9 < n_params(te) < 4.9e9  # T5-XXL encoder
    assert pipe.tokenizer.max_length == 300
    print(f"\nPixArt-Sigma transformer {n_params(tr) / 1e6:.2f}M, T5-XXL encoder {n_params(te) / 1e9:.3f}B, "
          f"VAE {n_params(comps['vae']) / 1e6:.2f}M")


def test_pixart_text_encoder_knob_on_meta():
    pipe = model_under_test.build_pipeline(dict(PIXART_SPEC, device="meta", options={"text_encoder": "t5-base"}))
    assert pipe.text_encoder.config.d_model == 768
    assert pipe.transformer.config.caption_channels == 768
    with pytest.raises(ValueError, match="t5-xxl"):
        model_under_test.build_pipeline(dict(PIXART_SPEC, device="meta", options={"text_encoder": "t5-huge"}))


@pytest.mark.parametrize("base", [DIT_SPEC, PIXART_SPEC], ids=["dit", "pixart"])
def test_random_weights_are_seeded(base):
    spec = dict(base, device="cpu", resolution=64, options={"tiny": True})
    first = model_under_test.build_pipeline(spec).components
    second = model_under_test.build_pipeline(spec).components
    for name, module in first.items():
        a, b = module.state_dict(), second[name].state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a), name
    other = model_under_test.build_pipeline(dict(spec, options={"tiny": True, "seed": 1})).components
    w = next(iter(first["transformer"].state_dict()))
    assert not torch.equal(first["transformer"].state_dict()[w], other["transformer"].state_dict()[w])


@pytest.mark.parametrize("spec,prompts", [
    (dict(DIT_SPEC, options={"tiny": True}), ["golden retriever", "tabby"]),
    (dict(PIXART_SPEC, options={"tiny": True}), ["a red bicycle", "a lighthouse in a storm"]),
], ids=["dit-tiny", "pixart-tiny"])  # full width, one block: tests/e2e/test_gpu_presets.py (seconds of CPU each)
def test_reduced_forward_on_cpu(spec, prompts):
    reduced_forward(model_under_test, spec, prompts)


def test_imagenet_prompts_and_tokenizer():
    assert parse_imagenet_class("golden retriever") == 207
    assert parse_imagenet_class("Golden Retriever") == 207
    assert parse_imagenet_class("207") == 207
    assert parse_imagenet_class("") is None
    with pytest.raises(ValueError, match="ImageNet"):
        parse_imagenet_class("lighthouse")
    tok = HashTokenizer(32128, 300)
    enc = tok(["a red bicycle", ""])
    assert enc["input_ids"].shape == (2, 300)
    assert enc["attention_mask"][0].sum() == 4 and enc["attention_mask"][1].sum() == 1
    assert enc["input_ids"][0, 3] == tok.eos_token_id and enc["input_ids"][1, 0] == tok.eos_token_id
    assert torch.equal(tok(["a red bicycle"])["input_ids"], enc["input_ids"][:1])
