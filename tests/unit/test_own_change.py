"""quality_suite/own_change.py: a candidate's own change is judged against the best's outputs at the class its
evidence shows against the best, while the chain is judged against the original baseline at the chain's class."""

from __future__ import annotations

from pathlib import Path

import torch

from dit_ar_contract.classes import ChangeClass
from dit_ar_contract.config import load_config
from quality_suite import own_change
from quality_suite.assessment import BaselineReference, Outputs, assess
from quality_suite.audit import AuditEvidence
from quality_suite.corpora import Case
from tests.helpers.loop import PROJECT

QUALITY = load_config(PROJECT / "config" / "autoresearch.json").lanes["embedded-cpu"].quality
ENVELOPE = {"latent_rel_l2": 1e-6, "latent_max_abs": 1e-5, "psnr_db": 120.0, "ssim": 1.0}
EVIDENCE = AuditEvidence.from_dict({"audit": {"param_dtypes": {"float32": 10}, "weight_bytes": 40},
                                    "activation_dtypes": ["float32"], "denoiser_rows_per_image": 20.0})
HALF_STEPS = AuditEvidence.from_dict({"audit": {"param_dtypes": {"float32": 10}, "weight_bytes": 40},
                                      "activation_dtypes": ["float32"], "denoiser_rows_per_image": 10.0})
CASES = [Case(f"c{i}", "a digit", i, 3) for i in range(4)]


def images(shift: float = 0.0, seed: int = 0) -> tuple[dict, dict]:
    g = torch.Generator().manual_seed(seed)
    imgs = {c.id: (torch.rand(3, 16, 16, generator=g) * 0.8 + 0.1 + shift).clamp(0, 1) for c in CASES}
    lats = {c.id: torch.randn(4, 4, 4, generator=g) + shift for c in CASES}
    return imgs, lats


def parent(shift: float = 0.0, cls: str = "approximate", evidence: AuditEvidence = HALF_STEPS
           ) -> own_change.ParentOutputs:
    imgs, lats = images(shift)
    return own_change.ParentOutputs(imgs, lats, evidence, cls)


def test_an_exact_change_on_an_approximate_best_must_be_exact_against_the_best() -> None:
    best = parent(shift=0.05)  # the best moved away from the baseline (a step cut)
    same_imgs, same_lats = images(shift=0.05)
    kept = own_change.judge("exact", same_imgs, same_lats, HALF_STEPS, best, QUALITY, ENVELOPE)
    assert kept.cls is ChangeClass.EXACT and kept.failures() == []  # the best's outputs: within any envelope
    moved_imgs, moved_lats = images(shift=0.08)  # a guidance change declared exact
    moved = own_change.judge("exact", moved_imgs, moved_lats, HALF_STEPS, best, QUALITY, ENVELOPE)
    assert moved.cls is ChangeClass.EXACT and moved.failures()
    assert all(c.name.endswith(" vs best") and "against the best's outputs" in c.message for c in moved.failures())


def test_the_best_s_own_class_never_raises_the_candidate_s_and_the_audit_against_the_best_does() -> None:
    best = parent(cls="approximate")
    imgs, lats = images()
    assert own_change.judge("exact", imgs, lats, HALF_STEPS, best, QUALITY, ENVELOPE).cls is ChangeClass.EXACT
    fewer = AuditEvidence.from_dict({"audit": {"param_dtypes": {"float32": 10}, "weight_bytes": 40},
                                     "activation_dtypes": ["float32"], "denoiser_rows_per_image": 5.0})
    cut_imgs, cut_lats = images(shift=0.02)  # fewer passes and other outputs: a step cut
    cut = own_change.judge("exact", cut_imgs, cut_lats, fewer, best, QUALITY, ENVELOPE)
    assert cut.cls is ChangeClass.APPROXIMATE and cut.checks == {}  # a further step cut: its task tests judge it


def test_numerical_is_held_to_the_numerical_floors_against_the_best() -> None:
    best = parent()
    near_imgs, near_lats = images(shift=1e-4)
    assert own_change.judge("numerical", near_imgs, near_lats, HALF_STEPS, best, QUALITY, ENVELOPE).failures() == []
    far_imgs, far_lats = images(shift=0.3)
    assert own_change.judge("numerical", far_imgs, far_lats, HALF_STEPS, best, QUALITY, ENVELOPE).failures()


def test_the_assessment_names_both_comparisons_and_fails_on_the_own_change() -> None:
    base_imgs, base_lats = images()
    ref = BaselineReference(Outputs(base_imgs, base_lats, EVIDENCE), ENVELOPE, {}, {})
    best = parent(shift=0.05)
    cand_imgs, cand_lats = images(shift=0.08)
    result = assess("exact", "approximate", Outputs(cand_imgs, cand_lats, HALF_STEPS), ref, CASES, QUALITY, (),
                    Path("."), parent=best)
    assert result.effective_class == "approximate" and result.own_class == "exact"
    assert result.headline().startswith("class=approximate against the original baseline; own change exact "
                                        "against the best")
    assert any(c.name.endswith(" vs best") for c in result.failures())
    again = type(result).from_dict(result.as_dict())
    assert again.own_class == "exact" and again.failures() == result.failures()
    alone = assess("exact", "approximate", Outputs(cand_imgs, cand_lats, HALF_STEPS), ref, CASES, QUALITY, (),
                   Path("."))
    assert alone.own_class == "" and not any(c.name.endswith(" vs best") for c in alone.failures())
