"""Clean rounds: balanced orders, the per-round records, throttle flags from (fake) NVML readings, the idle
wait, the pool's size from measured memory and the timed pair's cores (no subprocess, no GPU)."""

from __future__ import annotations

import random
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from dit_ar_contract.config import PerfProtocol
from dit_ar_contract.sides import Role, Sides
from pytest_dit_ar.loop.speed import clean_rounds
from pytest_dit_ar.loop.speed.clean_rounds import balanced_orders
from pytest_dit_ar.loop.speed.pairs import Pair, spare_cores, timed_cores
from pytest_dit_ar.loop.speed.pool import pairs_that_fit
from pytest_dit_ar.loop.speed.segment import run_segment
from pytest_dit_ar.state.perf_record import GpuSample, RoundRecord, SideTiming, flagged, rounds_summary
from pytest_dit_ar.worker.client import Generated


@pytest.mark.parametrize("rounds", [4, 8, 9, 12])
@pytest.mark.parametrize("cand_first", [True, False])
def test_orders_alternate_and_balance(rounds: int, cand_first: bool) -> None:
    orders = balanced_orders(rounds, cand_first)
    assert len(orders) == rounds
    assert orders[0] == ("CB" if cand_first else "BC")
    assert all(a != b for a, b in zip(orders, orders[1:]))
    assert abs(orders.count("CB") - orders.count("BC")) == rounds % 2


class FakeWorker:
    """A worker that answers generate with fixed images and records who was running when."""

    def __init__(self, side: str, log: list[tuple[str, str]], frozen: dict[str, bool], seconds: float):
        self.side, self.log, self.frozen, self.seconds = side, log, frozen, seconds

    def thaw(self) -> None:
        self.frozen[self.side] = False

    def freeze(self) -> None:
        self.frozen[self.side] = True

    def generate(self, requests: list, resolution: int | None = None) -> Generated:
        other = "best" if self.side == "cand" else "cand"
        assert not self.frozen[self.side] and self.frozen[other], "the other side must be frozen while timed"
        self.log.append((self.side, "generate"))
        images = torch.zeros(len(requests), 3, 4, 4)
        for i, (_, seed) in enumerate(requests):  # the seed's bytes in the first pixels: one image per request
            images[i, 0, 0] = torch.tensor([(seed >> (8 * k)) & 255 for k in range(4)], dtype=torch.float32) / 255
        return Generated(self.seconds, images, images[:, :1].clone(), 1.0, {"peak_rss_mb": 10.0})

    def peak_rss_mb(self) -> float:
        return 10.0

    freeze_waits: list[float] = []  # the harness's own host figures (security v3: cgroup-sampled)

    def peak_host_mb(self) -> float:
        return 10.0

    def kernel_peak_mb(self) -> None:
        return None

    pid = 100

    def processes(self) -> list[int]:
        return [self.pid, 101 if self.side == "cand" else 201]  # the worker and one helper

    def helpers(self) -> list[int]:
        return [p for p in self.processes() if p != self.pid]

    def gpu_memory_mb(self) -> None:
        return None


def fake_pair(cand_s: float = 0.1, best_s: float = 0.2) -> tuple[Pair, list]:
    log: list[tuple[str, str]] = []
    frozen = {"cand": False, "best": False}
    pair = Pair(FakeWorker("cand", log, frozen, cand_s), FakeWorker("best", log, frozen, best_s),  # type: ignore[arg-type]
                Sides(0.5, 0.5))
    return pair, log


class FakeWatch:
    def __init__(self, samples: list[list[GpuSample]], busy: bool = False, helpers: bool = True):
        self.samples, self.busy, self.with_helpers = list(samples), busy, helpers
        self.asked: list[set[int]] = []

    def helpers(self, pids: set[int]) -> list[int]:
        self.asked.append(pids)
        return sorted(pids) if self.with_helpers else []

    def sample(self) -> list[GpuSample]:
        return self.samples.pop(0) if self.samples else []

    def wait_idle(self, max_wait_s: float) -> tuple[float, bool]:
        return (max_wait_s, False) if self.busy else (0.0, True)


def test_a_segment_records_each_round_in_balanced_order() -> None:
    pair, log = fake_pair()
    seg = run_segment(pair, 0, ("a digit 1", "a digit 2"), 2, 8, 1, random.Random(3))
    assert seg.orders == [r.order for r in seg.rounds] and len(seg.rounds) == 8
    assert seg.orders.count("CB") == seg.orders.count("BC") == 4
    for record, cand_first in zip(seg.rounds, [o == "CB" for o in seg.orders]):
        c, b = record.sides.values()
        assert c.start <= c.end and b.start <= b.end
        assert (c.end <= b.start) if cand_first else (b.end <= c.start)  # one side after the other
    timed_log = log[2:]  # after the warm-up round
    for i, order in enumerate(seg.orders):
        assert [s for s, _ in timed_log[2 * i:2 * i + 2]] == (["cand", "best"] if order == "CB" else ["best", "cand"])
    assert seg.cand_s == [0.1] * 8 and seg.best_s == [0.2] * 8
    d = seg.to_dict()
    assert d["rounds"][0]["order"] == seg.orders[0] and d["flagged_rounds"] == []


def test_a_throttled_side_flags_its_round_and_the_summary_says_so() -> None:
    hot = GpuSample(1500, 450.0, 88, 0x40 | 0x1, 100)  # hardware thermal (plus idle, which is no slowdown)
    cool = GpuSample(1980, 300.0, 60, 0x1, 100)
    watch = FakeWatch([[cool], [cool], [cool], [hot]] + [[cool]] * 20)  # warm-up: 2 samples, then round 0: 2
    pair, _ = fake_pair()
    seg = run_segment(pair, 0, ("p",), 1, 4, 1, random.Random(0), watch=watch)
    assert flagged(seg.rounds) == [0]
    side = Role.BEST if seg.orders[0] == "CB" else Role.CANDIDATE  # the second side of round 0 read the hot one
    assert seg.rounds[0].throttled == Sides.of(lambda r: ["hardware thermal"] if r is side else [])
    line = rounds_summary(seg.rounds)
    assert line is not None and line.startswith("1 of 4 timed rounds flagged (hardware thermal")
    assert "kept in the verdict" in line
    assert rounds_summary(seg.rounds[1:]) is None


def test_a_side_timed_with_the_gpu_still_busy_is_flagged() -> None:
    pair, _ = fake_pair()
    watch = FakeWatch([], busy=True)
    seg = run_segment(pair, 0, ("p",), 1, 4, 0, random.Random(0), watch=watch)
    assert flagged(seg.rounds) == [0, 1, 2, 3]
    assert all(t.idle_wait_s > 0 and not t.idle for r in seg.rounds for t in r.sides.values())
    assert "GPU busy before timing" in (rounds_summary(seg.rounds) or "")
    assert {101, 201} == set().union(*watch.asked)  # the frozen side's helpers, never its worker


def test_without_a_helper_of_the_frozen_side_nothing_is_waited_for() -> None:
    pair, _ = fake_pair()
    seg = run_segment(pair, 0, ("p",), 1, 4, 0, random.Random(0), watch=FakeWatch([], busy=True, helpers=False))
    assert flagged(seg.rounds) == []
    assert all(t.idle_wait_s == 0 and t.idle for r in seg.rounds for t in r.sides.values())


def test_slowdown_bits_are_named_and_idle_or_boost_bits_are_not() -> None:
    assert GpuSample(throttle_reasons=0x1 | 0x2 | 0x10 | 0x100).slowdowns == []
    assert GpuSample(throttle_reasons=0x4 | 0x8 | 0x20 | 0x80).slowdowns == [
        "power cap", "hardware slowdown", "software thermal", "power brake"]


def fake_pynvml(reasons: int, util: list[int]) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    nvml.NVMLError = NVMLError
    nvml.NVML_CLOCK_SM = 1
    nvml.NVML_TEMPERATURE_GPU = 0
    nvml.nvmlInit = lambda: None
    nvml.nvmlDeviceGetHandleByUUID = lambda uuid: ("handle", uuid)
    nvml.nvmlDeviceGetPowerUsage = lambda h: 312_500  # milliwatts
    nvml.nvmlDeviceGetClockInfo = lambda h, kind: 1830
    nvml.nvmlDeviceGetTemperature = lambda h, kind: 71
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda h: reasons
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=7), types.SimpleNamespace(pid=9)]
    readings = iter(util)
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=next(readings, 0))
    return nvml


def test_nvml_watch_reads_clock_power_temperature_and_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(0x4, [37]))
    watch = clean_rounds.NvmlWatch(["GPU-1"])
    (sample,) = watch.sample()
    assert sample == GpuSample(1830, 312.5, 71, 0x4, 37)
    assert sample.slowdowns == ["power cap"]
    assert watch.helpers({9, 11}) == [9]


def test_the_idle_wait_stops_when_the_gpu_is_idle_or_the_time_is_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(0, [80, 40, 0]))
    now = [0.0]
    clock = lambda: now[0]  # noqa: E731
    sleep = lambda s: now.__setitem__(0, now[0] + s)  # noqa: E731
    watch = clean_rounds.NvmlWatch(["GPU-1"])
    waited, idle = clean_rounds.wait_until_idle(watch.busy, 1.0, clock, sleep)
    assert idle and waited == pytest.approx(2 * clean_rounds.IDLE_POLL_S)
    waited, idle = clean_rounds.wait_until_idle(lambda: True, 0.05, clock, sleep)
    assert not idle and waited >= 0.05
    assert clean_rounds.NoGpu().wait_idle(1.0) == (0.0, True) and clean_rounds.NoGpu().sample() == []


def test_round_records_serialise() -> None:
    r = RoundRecord(3, "BC", Sides(SideTiming(1.0, 2.0, 0.0, True, [GpuSample(1, 2.0, 3, 0x20)]), SideTiming(0.0, 1.0)))
    d = r.to_dict()
    assert d["throttled"] == {"cand": ["software thermal"]}
    assert d["sides"]["cand"]["gpu"][0]["sm_clock_mhz"] == 1 and d["sides"]["best"]["gpu"] == []


# -- the pool ------------------------------------------------------------------------------------------
def test_a5500_fits_two_dit_xl2_eager_pairs_and_one_pixart_worker() -> None:
    dit = pairs_that_fit(5.6 * 1024, 5.6 * 1024, 24 * 1024, max_pairs=8)
    assert dit.pairs == 2 and dit.workers_that_fit == 4
    pixart = pairs_that_fit(18 * 1024, 18 * 1024, 24 * 1024, max_pairs=8)
    assert pixart.pairs == 0 and pixart.workers_that_fit == 1


def test_the_pool_is_capped_and_one_pair_without_measured_memory() -> None:
    assert pairs_that_fit(100, 100, 10_000, max_pairs=3).pairs == 3
    assert pairs_that_fit(None, 100, 10_000, max_pairs=3).pairs == 1
    assert pairs_that_fit(100, 100, None, max_pairs=3).pairs == 1
    with pytest.raises(ValueError):
        pairs_that_fit(1, 1, 1, max_pairs=0)


# -- the timed pair's cores ---------------------------------------------------------------------------
def test_pair_cores_one_shared_core_on_cuda_and_the_affinity_on_cpu() -> None:
    p = replace(PerfProtocol(), cpu_affinity=(2, 3))
    assert timed_cores(p, is_cuda=True) == (2,)
    assert timed_cores(p, is_cuda=False) == (2, 3)
    assert timed_cores(replace(p, pair_cores="one"), is_cuda=False) == (2,)
    assert timed_cores(replace(p, pair_cores="affinity"), is_cuda=True) == (2, 3)
    free = timed_cores(replace(PerfProtocol(), cpu_affinity=None), is_cuda=True)
    assert free is not None and len(free) == 1
    assert timed_cores(replace(PerfProtocol(), cpu_affinity=None), is_cuda=False) is None


def test_spare_cores_leave_out_the_timed_ones() -> None:
    import os

    allowed = sorted(os.sched_getaffinity(0))
    assert spare_cores(None) is None
    assert spare_cores(tuple(allowed)) is None
    if len(allowed) > 1:
        assert spare_cores((allowed[0],)) == tuple(allowed[1:])


# -- concurrent pairs, rounds dealt round-robin (the layout perf_suite.sequential calls `pairs > 1`) ----------
class FakeLook:
    def __init__(self, final: bool):
        self.final, self.decision, self.reason = final, "keep" if final else "continue", "fake look"


class FakeTest:
    """The sequential test's interface for concurrent pairs: next_look() -> (pairs, rounds), update()."""

    def __init__(self, pairs: int, looks: list[int]):
        self.design = types.SimpleNamespace(pairs=pairs, concurrent=True)
        self.looks, self.updates = list(looks), []

    def next_look(self):
        return types.SimpleNamespace(pairs=self.design.pairs, rounds=self.looks[0]) if self.looks else None

    def update(self, cand_s, best_s):
        self.updates.append(([len(c) for c in cand_s], [len(b) for b in best_s]))
        self.looks.pop(0)
        return FakeLook(final=not self.looks)

    def spread(self) -> None:
        return None


class PinnableWorker(FakeWorker):
    def __init__(self, name: str, *args):
        super().__init__(*args)
        self.name = name

    def generate(self, requests: list, resolution: int | None = None) -> Generated:
        self.log.append((self.name, self.side))
        return super().generate(requests, resolution)

    def pin(self, cores) -> None:
        pass

    def close(self) -> None:
        self.log.append((self.name, "closed"))

    def kill(self) -> None:
        self.log.append((self.name, "killed"))


def concurrent_setup(monkeypatch: pytest.MonkeyPatch, protocol: PerfProtocol):
    from dit_ar_contract.config import Guardrails
    from pytest_dit_ar.loop.speed.measurement_plan import MeasurementPlan, Side
    from pytest_dit_ar.loop.speed.pairs import PairSource

    log: list[tuple[str, str]] = []

    def make(name: str) -> Pair:
        frozen = {"cand": False, "best": False}
        return Pair(PinnableWorker(name, "cand", log, frozen, 0.1),  # type: ignore[arg-type]
                    PinnableWorker(name, "best", log, frozen, 0.2), Sides(0.1, 0.1))  # type: ignore[arg-type]

    side = Side("x", Path("."), {})
    plan = MeasurementPlan(side, side, protocol, ("p",), 1, "latency_ms",
                           Guardrails(memory_growth_pct=None, startup_growth_pct=None))
    source = PairSource(plan, None, None, None)  # type: ignore[arg-type]
    monkeypatch.setattr(source, "start", lambda index, n: [make(f"p{index + i}") for i in range(n)])
    return plan, source, make, log


def test_concurrent_pairs_reach_a_verdict_of_the_real_sequential_test(monkeypatch: pytest.MonkeyPatch) -> None:
    from perf_suite.sequential import SequentialTest
    from pytest_dit_ar.loop.speed.measurement import measure_concurrent

    protocol = replace(PerfProtocol(), pairs=3, rounds=8, warmup_rounds=0)
    plan, source, make, _ = concurrent_setup(monkeypatch, protocol)
    test = SequentialTest(plan.design(), plan.offset_bound())
    seconds = {"startup": 0.0, "warmup": 0.0, "timed": 0.0}
    out = measure_concurrent(plan, test, source, make("p0"), None, None, None, seconds)
    assert out.keep and out.look is not None and out.look.final  # 0.1 s against 0.2 s in every round
    lengths = {len(s.cand_s) for s in out.segments}
    assert len(out.segments) == 3 and len(lengths) == 1 and lengths.pop() >= protocol.first_look_rounds


def test_concurrent_pairs_are_built_first_then_dealt_rounds_round_robin(monkeypatch: pytest.MonkeyPatch) -> None:
    from dit_ar_contract.config import Guardrails
    from pytest_dit_ar.loop.speed.measurement import measure_concurrent
    from pytest_dit_ar.loop.speed.measurement_plan import MeasurementPlan, Side
    from pytest_dit_ar.loop.speed.pairs import PairSource

    log: list[tuple[str, str]] = []

    def make(name: str) -> Pair:
        frozen = {"cand": False, "best": False}
        return Pair(PinnableWorker(name, "cand", log, frozen, 0.1),  # type: ignore[arg-type]
                    PinnableWorker(name, "best", log, frozen, 0.2), Sides(0.1, 0.1))  # type: ignore[arg-type]

    side = Side("x", Path("."), {})
    plan = MeasurementPlan(side, side, replace(PerfProtocol(), warmup_rounds=1), ("p",), 1, "latency_ms",
                           Guardrails(memory_growth_pct=None, startup_growth_pct=None))
    source = PairSource(plan, None, None, None)  # type: ignore[arg-type]
    started: list[int] = []
    monkeypatch.setattr(source, "start", lambda index, n: started.append(n) or [make(f"p{index + i}")
                                                                                  for i in range(n)])
    test = FakeTest(3, [4, 8])
    seconds = {"startup": 0.0, "warmup": 0.0, "timed": 0.0}
    out = measure_concurrent(plan, test, source, make("p0"), None, None, None, seconds)
    assert started == [2] and test.updates == [([4, 4, 4], [4, 4, 4]), ([8, 8, 8], [8, 8, 8])]
    assert out.keep and len(out.segments) == 3 and all(len(s.cand_s) == 8 for s in out.segments)
    timed_pairs = [name for name, what in log if what in ("cand", "best")][2 * 3:]  # after each pair's warm-up
    assert timed_pairs[:12] == ["p0", "p0", "p1", "p1", "p2", "p2"] * 2  # one round per pair in turn
    for seg in out.segments:
        assert all(a != b for a, b in zip(seg.orders, seg.orders[1:]))
    assert sorted(name for name, what in log if what == "closed") == ["p0", "p0", "p1", "p1", "p2", "p2"]
    assert seconds["timed"] == pytest.approx(3 * 8 * 0.3)


def test_fork_servers_per_side_default_two_on_cuda_one_on_cpu() -> None:
    assert PerfProtocol().fork_servers(is_cuda=True) == 2 and PerfProtocol().fork_servers(is_cuda=False) == 1
    assert replace(PerfProtocol(), fork_servers_per_side=3).fork_servers(is_cuda=False) == 3

