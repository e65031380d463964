"""Guardrails judge the steady state: the growth guardrail reads the harness's memory samples taken after warm-up
(a compile's transient is recorded, and judged only by a hard budget), and the p95 guardrail compares the sides'
tails over the same rounds with a bootstrap bound, so a load spike on one side does not flip it while a
candidate that stalls in a share of its rounds is still refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dit_ar_contract.config import Guardrails, PerfProtocol
from dit_ar_contract.sides import Sides
from perf_suite import guardrails as guard
from pytest_dit_ar.loop.speed.measurement import guardrail_problems
from pytest_dit_ar.loop.speed.measurement_plan import MeasurementPlan, Side
from pytest_dit_ar.state.perf_record import MemoryFigures, SegmentRecord
from pytest_dit_ar.worker.cgroup import Sampler
from pytest_dit_ar.worker.gpu_memory import MemorySampler

# the CPU lane's compiled candidate as measured (tests' numbers: a whole-run peak of 1,069 MB while the compile
# ran, 576 MB held afterwards; the eager best 471 MB throughout)
COMPILED = MemoryFigures(peak_rss_mb=1069.0, steady_host_mb=576.0)
EAGER = MemoryFigures(peak_rss_mb=471.0, steady_host_mb=471.0)


def plan(**guardrails: float | None) -> MeasurementPlan:
    side = Side("x", Path("."), {})
    return MeasurementPlan(side, side, PerfProtocol(), ("p",), 1, "latency_ms", Guardrails(**guardrails))


def segment(cand: MemoryFigures, best: MemoryFigures, cand_s: list[float] | None = None) -> SegmentRecord:
    return SegmentRecord(0, cand_s or [0.1] * 12, [0.2] * 12, memory=Sides(cand, best))


def test_the_host_sampler_keeps_a_steady_peak_from_its_mark() -> None:
    readings = iter([500.0, 1069.0, 600.0, 576.0, 580.0])
    sampler = Sampler(lambda: next(readings))  # not started: readings only when asked
    sampler.sample(), sampler.sample()
    assert sampler.steady is None
    sampler.mark_steady()  # reads 600
    sampler.sample(), sampler.sample()
    assert (sampler.peak, sampler.steady) == (1069.0, 600.0)


def test_the_device_sampler_keeps_each_sides_steady_peak() -> None:
    readings = iter([{"cand": 9000.0, "best": 4000.0}, {"cand": 5000.0, "best": 4100.0}])
    sampler = MemorySampler(lambda: next(readings))
    sampler.sample()
    sampler.mark_steady()
    assert (sampler.peak("cand"), sampler.steady_peak("cand"), sampler.steady_peak("best")) == (9000.0, 5000.0, 4100.0)


def test_a_compile_transient_is_recorded_but_not_judged_by_the_growth_guardrail() -> None:
    problems, figures = guardrail_problems(plan(memory_growth_pct=10.0), [segment(COMPILED, EAGER)], final=True)
    assert problems == []
    assert figures["cand_steady_mb"] == 576.0 and figures["cand_peak_mb"] == 1069.0  # both in the record
    grown = MemoryFigures(peak_rss_mb=1069.0, steady_host_mb=1069.0)  # the same memory held while timed
    problems, _ = guardrail_problems(plan(memory_growth_pct=10.0), [segment(grown, EAGER)], final=True)
    assert len(problems) == 1 and "steady peak memory (after warm-up) 1069 MB" in problems[0]


def test_a_hard_budget_still_judges_the_whole_run_peak() -> None:
    problems, _ = guardrail_problems(plan(memory_growth_pct=10.0, peak_memory_mb=1000.0),
                                     [segment(COMPILED, EAGER)], final=True)
    assert len(problems) == 1 and "exceeds the budget 1000 MB" in problems[0]


def test_a_gpu_sides_steady_figure_is_the_harness_nvml_sample() -> None:
    figures = MemoryFigures(peak_rss_mb=3000.0, gpu_sampled_mb=20_000.0, steady_sampled_mb=12_000.0,
                            steady_host_mb=2500.0, peak_reserved_mb=19_000.0)
    assert (figures.peak_mb, figures.steady_mb) == (20_000.0, 12_000.0)
    earlier = MemoryFigures(peak_rss_mb=3000.0, gpu_nvml_mb=9000.0)  # a record from before the steady samples
    assert earlier.steady_mb == 9000.0
    assert MemoryFigures(peak_rss_mb=470.0).steady_mb == 470.0


def test_figures_survive_the_record() -> None:
    seg = SegmentRecord.from_dict(segment(COMPILED, EAGER).to_dict())
    assert seg.memory.candidate == COMPILED


def loaded_rounds(rng: np.random.Generator, segments: int, stall_p: float = 0.0) -> tuple[list, list]:
    """Paired rounds of a no-op under load: a shared round factor, each side's own noise and, in 5% of each side's
    rounds, a load spike (x1.5-2.5) that hit that side only; `stall_p`: the candidate stalls +400 ms."""
    n = (segments, 12)
    shared = np.exp(rng.normal(0, 0.03, n))
    spikes = np.where(rng.random((2, *n)) < 0.05, rng.uniform(1.5, 2.5, (2, *n)), 1.0)
    cand = 0.2 * shared * spikes[0] + np.where(rng.random(n) < stall_p, 0.4, 0.0)
    return cand.tolist(), (0.2 * shared * spikes[1]).tolist()


def test_a_load_spike_on_one_side_does_not_flip_the_tail_guardrail() -> None:
    # the CPU lane's anecdote: a spike or two on the candidate's side made its pooled p95 twice the best's
    cand, best = [[0.2] * 12 for _ in range(3)], [[0.2] * 12 for _ in range(3)]
    cand[1][4], cand[2][7], best[0][3] = 0.449, 0.431, 0.41
    pooled = guard.p95([t for s in cand for t in s]) > 1.1 * guard.p95([t for s in best for t in s])
    found = guard.tail_latency(cand, best, 10.0)
    assert pooled and found.problem is None and found.figures["p95_ratio"] > 1.1


def test_a_candidate_that_stalls_in_a_fifth_of_its_rounds_is_refused_under_load() -> None:
    rng = np.random.default_rng(7)
    refused = [guard.tail_latency(*loaded_rounds(rng, 4, stall_p=0.2), 10.0).problem is not None for _ in range(20)]
    assert sum(refused) >= 16
    noop = [guard.tail_latency(*loaded_rounds(rng, 4), 10.0).problem is not None for _ in range(20)]
    assert sum(noop) <= 2


def test_a_shared_slowdown_moves_both_tails_alike() -> None:
    slow = [1.0] * 10 + [3.0] * 2  # two rounds in which the host was slow for both sides
    found = guard.tail_latency([slow] * 3, [[t * 0.98 for t in slow]] * 3, 10.0)
    assert found.problem is None and found.figures["p95_ratio_lower"] < 1.1


def test_the_summary_shows_the_steady_and_the_whole_run_peaks() -> None:
    from pytest_dit_ar.state.perf_record import PerfRecord

    _, figures = guardrail_problems(plan(memory_growth_pct=10.0, peak_memory_mb=4096.0), [segment(COMPILED, EAGER)],
                                    final=True)
    line = PerfRecord(True, [], [], guardrails=figures).memory_line() or ""
    assert line.startswith("steady (after warm-up, judged) candidate 576 MB, best 471 MB (limit 582 MB)")
    assert line.endswith("candidate 1069 MB, best 471 MB (budget 4096 MB)")
    assert PerfRecord(True, [], []).memory_line() is None
