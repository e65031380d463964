"""The memory plan (loop.workers.memory_plan): what may live at once on the target's card."""

from dit_ar_contract.sides import Role
from pytest_dit_ar.loop.workers.memory_plan import MemoryBudget, budget, layout, may_prefetch, order

A5500 = budget(True, 24.0, True, None, 24.0)


def test_the_budget_comes_from_the_emulated_card_then_the_target_then_the_device():
    assert budget(True, 24.0, False, 24.0, 140.0).mb == 24 * 1024
    assert "emulated" in budget(True, 24.0, False, 24.0, 140.0).source
    assert budget(True, 24.0, True, None, 24.0).mb == 24 * 1024
    assert budget(True, 24.0, False, None, 140.0).mb == 140 * 1024
    assert budget(False, 24.0, True, 24.0, None).mb is None


def test_two_dit_workers_fit_a_24_gb_card():
    assert layout(A5500, 3000.0, 2800.0).mode == "pair"


def test_two_pixart_workers_do_not_fit_and_run_one_at_a_time():
    # PixArt-Sigma-1024's baseline reserves 18.81 GB per worker (docs/design/speed-verdict.md)
    got = layout(A5500, None, 18.81 * 1024)
    assert got.mode == "alternate" and "one side at a time" in got.reason


def test_a_candidate_that_grows_past_the_pair_switches_to_alternate():
    assert layout(A5500, 14000.0, 10000.0).mode == "alternate"
    assert layout(A5500, 9000.0, 9000.0).mode == "pair"


def test_a_best_that_cannot_fit_alone_is_refused_in_one_line():
    got = layout(A5500, None, 25 * 1024)
    assert got.mode == "refuse" and "\n" not in got.reason and "cannot be judged" in got.reason


def test_the_headroom_is_kept_free():
    assert layout(A5500, 12 * 1024, 12 * 1024).mode == "alternate"  # 24 GB exactly leaves no headroom


def test_unknown_budget_or_peaks_pair():
    assert layout(MemoryBudget(None, "cpu"), 1e9, 1e9).mode == "pair"
    assert layout(A5500, None, None).mode == "pair"


def test_the_best_is_prefetched_only_when_two_of_it_fit():
    assert may_prefetch(A5500, 9000.0)
    assert not may_prefetch(A5500, 18.81 * 1024)
    assert may_prefetch(A5500, None)


def test_alternating_order_swaps_every_segment():
    cand, best = Role.CANDIDATE, Role.BEST
    assert [order(i, best) for i in range(3)] == [(best, cand), (cand, best), (best, cand)]


def test_an_experiment_whose_best_cannot_fit_is_refused_before_it_runs():
    import pytest

    from dit_ar_contract.errors import Refused
    from pytest_dit_ar.loop.candidate import CandidateWorkers

    ev = CandidateWorkers.__new__(CandidateWorkers)  # only the memory check: no session, no workers
    ev.memory = budget(True, 24.0, False, 16.0, 140.0)
    ev.best_peak_mb = lambda: 18.81 * 1024
    with pytest.raises(Refused, match="emulated_vram_gb = 16"):
        ev.refuse_unless_best_fits()
    ev.best_peak_mb = lambda: 6000.0
    ev.refuse_unless_best_fits()
