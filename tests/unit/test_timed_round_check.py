"""The per-round check of timed outputs (loop/speed/timing.py round_check): a timed case outside its class's gate but
inside the next looser one (exact -> numerical -> approximate) is allowed for at most 5% of the timed cases so
far (at least one), since a fresh request may amplify a change's error more than the corpus's cases did; a
change that differs on every timed round still fails, and anything outside the looser gate fails at once. An
approximate change, with no looser gate, gets the same allowance outside its own floors."""

from __future__ import annotations

import types

import torch

from dit_ar_contract.config import load_config
from pytest_dit_ar.loop.speed import timing
from pytest_dit_ar.worker.client import Generated

ENVELOPE = {"latent_rel_l2": 2e-6, "latent_max_abs": 1e-5, "psnr_db": 120.0, "ssim": 1.0}


def check(cls: str = "exact"):
    lane = load_config("config/autoresearch.json").lanes["embedded-cpu"]
    quality = types.SimpleNamespace(effective_class=cls, approximate_outputs=False)
    return timing.round_check(quality, ENVELOPE, types.SimpleNamespace(lane=lane))  # type: ignore[arg-type]


def pair(rel: float, n: int = 2, seed: int = 0, image_noise: float = 0.0) -> tuple[Generated, Generated]:
    g = torch.Generator().manual_seed(seed)
    best = torch.randn(n, 4, 8, 8, generator=g)
    cand = best + rel * best.norm() / best[0].numel() ** 0.5 / n ** 0.5 * torch.randn(n, 4, 8, 8, generator=g)
    images = torch.rand(n, 3, 16, 16, generator=g)
    noisy = (images + image_noise * torch.randn(images.shape, generator=g)).clamp(0, 1)
    return (Generated(0.1, noisy, cand, None, {}), Generated(0.1, images.clone(), best, None, {}))


def test_one_amplified_case_of_an_exact_change_passes_and_a_second_early_one_fails() -> None:
    c = check()
    assert c(*pair(0.0)) == []
    assert c(*pair(4e-5, n=1)) == []  # 4x the exact limit, far inside the numerical gate: the one allowed
    second = c(*pair(4e-5, n=1, seed=1))
    assert second and "2 of 4 timed cases outside the exact gate, 1 allowed" in second[0]


def test_a_change_that_differs_on_every_timed_round_fails() -> None:
    c = check()
    failures = [f for seed in range(6) for f in c(*pair(1e-3, seed=seed))]
    assert failures and "outside the baseline's noise envelope" in failures[0]


def test_outside_the_numerical_gate_fails_at_once() -> None:
    failures = check()(*pair(0.2, n=1))
    assert failures and "latent_rel_l2" in failures[0]


def test_a_numerical_change_gets_the_same_allowance_within_the_approximate_gate() -> None:
    c = check("numerical")
    assert c(*pair(4e-5)) == []
    assert c(*pair(0.08, n=1)) == []  # over the numerical 0.05 once: inside the approximate floors
    assert c(*pair(0.08, n=1, seed=1))  # twice in 4 cases: fails


def test_an_approximate_change_gets_the_allowance_with_no_looser_gate_behind_it() -> None:
    assert check("approximate")(*pair(0.0, n=1)) == []
    c = check("approximate")
    assert c(*pair(0.9, n=1, image_noise=0.5)) == []  # one fresh case outside its floors: a tail, allowed
    assert c(*pair(0.9, n=1, image_noise=0.5, seed=1))  # twice in 2 cases: not the program judged
    c = check("approximate")
    assert c(*pair(0.9, n=4, image_noise=0.5))  # a round whose every case leaves the floors fails at once


def with_rows(pair_: tuple[Generated, Generated], rows: float | None) -> tuple[Generated, Generated]:
    cand, best = pair_
    return Generated(cand.seconds, cand.images, cand.latents, rows, {}), best


def test_a_candidate_that_runs_fewer_denoiser_rows_when_timed_fails() -> None:
    """The red team's approximate candidate ran 4 sampling steps in its timed workers only: its outputs stayed
    inside the approximate gate, its denoiser rows did not match the quality run's."""
    lane = load_config("config/autoresearch.json").lanes["embedded-cpu"]
    quality = types.SimpleNamespace(effective_class="approximate", approximate_outputs=False)
    c = timing.round_check(quality, ENVELOPE, types.SimpleNamespace(lane=lane), 40.0)  # type: ignore[arg-type]
    assert c(*with_rows(pair(0.0), 40.0)) == []
    assert c(*with_rows(pair(0.0, seed=1), 8.0)) == []  # one round with fewer rows is allowed (an adaptive sampler)
    failures = c(*with_rows(pair(0.0, seed=2), 8.0))
    assert failures and "the program timed is not the program judged" in failures[-1]
    assert "2 of 3 timed rounds ran fewer" in failures[-1]


def test_rows_the_harness_cannot_count_judge_nothing() -> None:
    lane = load_config("config/autoresearch.json").lanes["embedded-cpu"]
    quality = types.SimpleNamespace(effective_class="approximate", approximate_outputs=False)
    blind = timing.round_check(quality, ENVELOPE, types.SimpleNamespace(lane=lane), None)  # type: ignore[arg-type]
    assert all(blind(*with_rows(pair(0.0, seed=s), 8.0)) == [] for s in range(4))  # no quality count
    c = timing.round_check(quality, ENVELOPE, types.SimpleNamespace(lane=lane), 40.0)  # type: ignore[arg-type]
    assert all(c(*with_rows(pair(0.0, seed=s), rows)) == [] for s, rows in enumerate((None, 0.0, None, 0.0)))
