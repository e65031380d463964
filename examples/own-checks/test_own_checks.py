"""Checks of your own, next to the harness's: run them with `pytest examples/own-checks` (plain mode: the
working tree against the session's baseline; nothing in git changes). The README's "Write your own checks"
section explains each fixture used here."""

from __future__ import annotations

import torch


def test_no_case_gets_darker(dit_ar_case, dit_ar_baseline_case, dit_ar_candidate_case):
    """A brightness drift the fidelity floors might tolerate is still a change a user would notice."""
    drop = float(dit_ar_baseline_case.image.mean() - dit_ar_candidate_case.image.mean())
    assert drop < 0.02, f"{dit_ar_case.id}: the candidate is {drop:.3f} darker than the baseline"


def test_images_keep_the_baseline_shape(dit_ar_case, dit_ar_baseline_case, dit_ar_candidate_case):
    assert dit_ar_candidate_case.image.shape == dit_ar_baseline_case.image.shape
    assert torch.isfinite(dit_ar_candidate_case.latent).all()


def test_worst_case_psnr_has_headroom(dit_ar_quality, dit_ar_session):
    """The harness's own assessment is available too: ask for more headroom than the gate does."""
    floor = dit_ar_session.lane.quality.numerical.min_psnr_db
    worst = min(f["psnr_db"] for f in dit_ar_quality.fidelity.values())
    assert worst >= floor + 3.0, f"worst PSNR {worst:.1f} dB is within 3 dB of the gate's {floor} dB"
