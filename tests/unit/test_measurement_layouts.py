"""loop.speed.measurement with stand-in workers: warm-up until steady, one side at a time when the pair does not fit,
and a clear refusal when one worker cannot fit (no processes: the workers are fakes)."""

from __future__ import annotations

import random
import threading
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from dit_ar_contract.config import Guardrails, PerfProtocol
from dit_ar_contract.errors import Refused
from dit_ar_contract.sides import Role, Sides
from pytest_dit_ar.loop.speed import alternating, pairs, segment
from pytest_dit_ar.loop.speed import measurement as m
from pytest_dit_ar.loop.speed.measurement_plan import MeasurementPlan, Side
from pytest_dit_ar.loop.workers.memory_plan import MemoryBudget
from pytest_dit_ar.state.perf_record import SegmentRecord
from pytest_dit_ar.worker.client import Generated


def _image(prompt: str, seed: int) -> torch.Tensor:
    """A 3x2x2 image that differs for every (prompt, seed < 2**64): the seed's 8 bytes and 4 of the prompt's
    CRC (a residue such as seed % 997 repeats for two of a segment's random seeds now and then: a false
    collision, which made CI fail once)."""
    values = [(seed >> (8 * i)) & 255 for i in range(8)] + list(zlib.crc32(prompt.encode()).to_bytes(4, "big"))
    return torch.tensor(values, dtype=torch.float32).reshape(3, 2, 2)


class FakeWorker:
    """Generates in `times` seconds (first calls slow, like a compile), an image of its own for each request."""

    alive: list[FakeWorker] = []
    max_alive = 0

    def __init__(self, side: str, times: list[float]):
        self.side, self.times, self.calls = side, list(times), 0
        self.target = SimpleNamespace(device="cpu")
        self.pid = -1
        self.cache_warm: bool | None = True
        self.started: list[float] = []

    def spawn(self) -> FakeWorker:
        FakeWorker.alive.append(self)
        FakeWorker.max_alive = max(FakeWorker.max_alive, len(FakeWorker.alive))
        return self

    def handshake(self) -> FakeWorker:
        return self

    def request(self, op: str, **_: object) -> dict:
        return {}

    def generate(self, requests: list, resolution: int | None = None) -> Generated:
        t = self.times[min(self.calls, len(self.times) - 1)]
        self.calls += 1
        images = torch.stack([_image(prompt, seed) for prompt, seed in requests])
        return Generated(t, images, images[:, :1], None, {})

    def close(self) -> None:
        if self in FakeWorker.alive:
            FakeWorker.alive.remove(self)

    kill = close

    def freeze(self) -> None: ...
    def thaw(self) -> None: ...
    def pin(self, cores: object) -> None: ...
    def processes(self) -> list[int]: return []
    def helpers(self) -> list[int]: return []
    def peak_rss_mb(self) -> float: return 100.0
    def peak_host_mb(self) -> float: return 100.0
    def kernel_peak_mb(self) -> None: return None
    freeze_waits: list[float] = []
    def gpu_memory_mb(self) -> None: return None
    def note_start(self, seconds: float) -> None: self.started.append(seconds)
    def note_peak(self, mb: float | None) -> None: ...


class FakeLauncher:
    def __init__(self, times: dict[str, list[float]]):
        self.times, self.made = times, []

    def worker(self, side: str, root: Path, log_path: Path) -> FakeWorker:
        w = FakeWorker(side, self.times[side])
        self.made.append(w)
        return w


def plan(tmp_path: Path, **kw: object) -> MeasurementPlan:
    protocol = PerfProtocol(warmup_rounds=1, rounds=4, min_segments=2, max_segments=2, warmup_window=2,
                            warmup_steady_pct=5.0, warmup_max_rounds=6, fork_server=False)
    kw.setdefault("guardrails", Guardrails(startup_budget_s=None))
    return MeasurementPlan(cand=Side("candidate", tmp_path, {}), best=Side("best", tmp_path, {}),
                             protocol=protocol, prompts=("a", "b"), batch=1, metric="latency_ms", log_dir=tmp_path,
                             **kw)


@pytest.fixture(autouse=True)
def _reset() -> None:
    FakeWorker.alive, FakeWorker.max_alive = [], 0


def test_each_side_warms_up_until_its_own_round_time_is_steady(tmp_path: Path) -> None:
    pair = pairs.Pair(FakeWorker("cand", [9.0, 1.0, 0.5, 0.5, 0.5]).spawn(), FakeWorker("best", [1.0, 1.0]).spawn())
    rule = plan(tmp_path).warmup_rule()
    seg = segment.run_segment(pair, 0, ("a",), 1, 4, rule, random.Random(1))
    assert seg.warmup_s.candidate == [9.0, 1.0, 0.5, 0.5] and seg.warmup_state.candidate == "steady"
    assert seg.warmup_s.best == [1.0, 1.0] and seg.warmup_state.best == "steady"
    assert seg.cand_s == [0.5] * 4
    assert pair.cand.started == [pytest.approx(11.0)]  # recorded as this tree's start-up


class MeetingWorker(FakeWorker):
    """Its first generate waits (at most 5 s) until the other side's first generate runs too."""

    def __init__(self, side: str, times: list[float], barrier: threading.Barrier):
        super().__init__(side, times)
        self.barrier = barrier

    def generate(self, requests: list, resolution: int | None = None) -> Generated:
        if self.calls == 0:
            self.barrier.wait()  # BrokenBarrierError when the sides took turns
        return super().generate(requests, resolution)


def test_a_fresh_pairs_first_warm_up_generates_run_at_once_on_gpu_lanes(tmp_path: Path) -> None:
    """On CUDA lanes a fresh pair's first generates (kernel loading, graph capture) run at the same time; the
    later warm-up rounds and every timed round still take turns, and the first times count as warm-up."""
    barrier = threading.Barrier(2, timeout=5)
    pair = pairs.Pair(MeetingWorker("cand", [9.0, 0.5, 0.5, 0.5], barrier).spawn(),
                  MeetingWorker("best", [8.0, 1.0, 1.0], barrier).spawn())
    own = Sides((0,), (1,))
    seg = segment.run_segment(pair, 0, ("a",), 1, 4, plan(tmp_path).warmup_rule(), random.Random(1), warm_cores=own)
    assert seg.warmup_s.candidate == [9.0, 0.5, 0.5] and seg.warmup_s.best == [8.0, 1.0, 1.0]
    assert seg.cand_s == [0.5] * 4 and seg.best_s == [1.0] * 4
    # the first generates ran at once: the warm-up's wall time counts them once (their real wall time here)
    assert seg.together_s < 1.0 and seg.warmup_wall_s == pytest.approx(3.0 + seg.together_s)
    with pytest.raises(threading.BrokenBarrierError):  # without it the sides take turns from the first generate
        lone = threading.Barrier(2, timeout=0.2)
        lonely = pairs.Pair(MeetingWorker("cand", [1.0], lone).spawn(), MeetingWorker("best", [1.0], lone).spawn())
        segment.run_segment(lonely, 0, ("a",), 1, 1, 1, random.Random(1))


def test_a_fixed_count_still_means_exactly_that_many_rounds(tmp_path: Path) -> None:
    pair = pairs.Pair(FakeWorker("cand", [3.0, 2.0, 1.0]).spawn(), FakeWorker("best", [1.0]).spawn())
    seg = segment.run_segment(pair, 0, ("a",), 1, 4, 2, random.Random(1))
    assert len(seg.warmup_s.candidate) == len(seg.warmup_s.best) == 2


def test_sides_that_do_not_fit_together_run_one_at_a_time(tmp_path: Path) -> None:
    launcher = FakeLauncher({"candidate": [0.4], "best": [0.5]})
    budget = MemoryBudget(24 * 1024, "guardrails.emulated_vram_gb = 24")
    out = m.measure(plan(tmp_path, memory=budget, known_peaks_mb=Sides(None, 18.8 * 1024)), launcher)
    assert FakeWorker.max_alive == 1  # never two workers alive at once
    assert [s.layout for s in out.segments] == ["alternate", "alternate"]
    assert out.segments[0].orders[0] != out.segments[1].orders[0]  # the order of the sides swaps
    assert len(out.segments[0].cand_s) == len(out.segments[0].best_s) == 4
    assert "one side at a time" in out.guardrails["memory_layout"]
    assert "one side at a time: candidate" in out.startup_line()
    assert out.look is not None and out.look.estimate_pct > 0  # 0.4 s against 0.5 s
    # every second of an alternating segment is in a named phase (wave 6, H200: 142 s were unexplained)
    assert {"startup", "warmup", "timed", "round_checks", "teardown"} <= set(out.seconds)


def test_sides_that_fit_keep_the_paired_protocol(tmp_path: Path) -> None:
    launcher = FakeLauncher({"candidate": [0.4], "best": [0.5]})
    budget = MemoryBudget(24 * 1024, "target.vram_gb = 24")
    out = m.measure(plan(tmp_path, memory=budget, known_peaks_mb=Sides(None, 3000.0)), launcher)
    assert [s.layout for s in out.segments] == ["pair", "pair"] and FakeWorker.max_alive == 2


def test_a_best_that_cannot_fit_alone_is_refused(tmp_path: Path) -> None:
    launcher = FakeLauncher({"candidate": [0.4], "best": [0.5]})
    budget = MemoryBudget(16 * 1024, "guardrails.emulated_vram_gb = 16")
    with pytest.raises(Refused, match="cannot be judged"):
        m.measure(plan(tmp_path, memory=budget, known_peaks_mb=Sides(None, 18.8 * 1024)), launcher)
    assert not launcher.made  # refused before any worker started


def test_the_warm_start_decides_and_the_cold_compile_is_only_recorded(tmp_path: Path) -> None:
    # the cold compile (300 s) exceeds the 120 s budget; the warm workers start in ~2 s: kept
    launcher = FakeLauncher({"candidate": [1.5, 0.4], "best": [0.5]})
    p = plan(tmp_path, cold_start_s=300.0, guardrails=Guardrails(startup_budget_s=120.0))
    out = m.measure(p, launcher)
    assert out.guardrails["cand_cold_start_s"] == 300.0
    assert out.guardrails["cand_warm_startup_s"] < 120.0
    assert not any("start-up" in r for r in out.reasons)
    line = out.startup_line()  # the summary's start-up: line
    assert "warm-up rounds per segment: candidate " in line and "best " in line
    assert "cold start 300.0 s" in line and "recorded, not judged" in line and "(budget 120 s)" in line
    assert out.to_dict()["startup"]["cand_cold_start_s"] == 300.0  # perf.json
    slow = FakeLauncher({"candidate": [200.0, 0.4], "best": [0.5]})
    out = m.measure(plan(tmp_path, guardrails=Guardrails(startup_budget_s=120.0)), slow)
    assert not out.keep and any("warm start-up" in r for r in out.reasons)


def test_an_alternating_segment_s_wall_time_is_all_in_named_phases() -> None:
    seg = SegmentRecord(0, [0.4] * 2, [0.5] * 2, [[1], [2]], ["CB", "CB"], Sides([1.0], [2.0]), Sides(3.0, 4.0),
                        layout="alternate", spawn_s=20.0, close_s=5.0)
    seconds: dict[str, float] = {"timed": 1.0}
    alternating.count_alternating(seconds, seg, wall_s=40.0)
    assert seconds == pytest.approx({"startup": 27.0, "teardown": 5.0, "warmup": 3.0, "timed": 2.8,
                                     "round_checks": 40.0 - 27.0 - 5.0 - 3.0 - 1.8})


class FakeForks:
    """Fork servers of stand-in workers: each fork is a fresh FakeWorker of that side."""

    def __init__(self, launcher: FakeLauncher):
        self.readied = 0
        self.cand = SimpleNamespace(fork=lambda tag: launcher.worker("candidate", Path(), Path()).spawn(),
                                    note_ready=lambda w: None)
        self.best = SimpleNamespace(fork=lambda tag: launcher.worker("best", Path(), Path()).spawn(),
                                    note_ready=lambda w: None)

    def side(self, role: Role) -> SimpleNamespace:
        return self.cand if role is Role.CANDIDATE else self.best

    def ready(self) -> FakeForks:
        self.readied += 1
        return self

    def times(self) -> dict:
        return {}


def test_one_side_at_a_time_takes_its_workers_from_the_fork_servers(tmp_path: Path) -> None:
    launcher = FakeLauncher({"candidate": [0.4], "best": [0.5]})
    forks = FakeForks(launcher)
    budget = MemoryBudget(24 * 1024, "guardrails.emulated_vram_gb = 24")
    out = m.measure(plan(tmp_path, memory=budget, known_peaks_mb=Sides(None, 18.8 * 1024)), launcher,
                    forks=forks)  # type: ignore[arg-type]
    assert [s.layout for s in out.segments] == ["alternate", "alternate"] and all(s.forked for s in out.segments)
    assert forks.readied == 4 and FakeWorker.max_alive == 1  # one fork per side and segment, one alive at once


def test_the_first_generates_get_halves_of_the_spare_cores_on_gpu_lanes_only(monkeypatch) -> None:
    monkeypatch.setattr(pairs.os, "sched_getaffinity", lambda _: set(range(16)))
    assert pairs.warm_cores((15,), True) == Sides(tuple(range(7)), tuple(range(7, 15)))
    assert pairs.warm_cores((15,), False) is None and pairs.warm_cores(None, True) is None
    monkeypatch.setattr(pairs.os, "sched_getaffinity", lambda _: {0, 1})
    assert pairs.warm_cores((1,), True) is None  # one spare core: the sides take turns
