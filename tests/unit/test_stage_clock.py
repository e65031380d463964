"""perf_suite.stage_clock and the profile's FLOP count of a graphed pipeline, on the CPU: the stage partition adds
up to the latency, the clock sees the stage ranges a pipeline emits, and a "graph" whose replays hide from the
FLOP counter and from the row counter (a stand-in for torch.cuda.CUDAGraph: capture runs the operators once,
replay runs them out of the dispatch modes' sight) is still attributed to its stage and counted through a
replica built under the FLOP counter. Timed properties (which stage dominates a real pipeline) are in
tests/e2e/test_profile.py."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import record_function
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils.flop_counter import FlopCounterMode

from perf_suite import profiling
from perf_suite.stage_clock import GraphLedger, Span, StageClock, clocked_generate, partition

N = 64
MATMUL = 2 * N**3  # the FLOPs of one [N, N] @ [N, N]


def test_the_partition_adds_up_to_the_latency_and_follows_the_device() -> None:
    spans = [Span("text_encode", 0.000, 0.001),
             Span("denoise", 0.002, 0.010, device_exit_s=0.050),  # the host queued the work; the device ran it
             Span("decode", 0.011, 0.012, device_exit_s=0.060)]
    stages, outside = partition(spans, total_s=0.061)
    assert stages["text_encode"] == pytest.approx(1.0)
    assert stages["denoise"] == pytest.approx(48.0)  # from its host entry to the device's finish
    assert stages["decode"] == pytest.approx(10.0)  # from the denoise's finish on: it waited in the queue
    assert outside == pytest.approx(2.0)  # the gap before denoise and the tail after decode
    assert sum(stages.values()) + outside == pytest.approx(61.0)


def test_repeated_ranges_add_up_and_a_host_only_pipeline_is_its_host_times() -> None:
    spans = [Span("denoise", 0.0, 0.004), Span("denoise", 0.005, 0.009), Span("decode", 0.009, 0.010)]
    stages, outside = partition(spans, total_s=0.010)
    assert stages == pytest.approx({"denoise": 8.0, "decode": 1.0}) and outside == pytest.approx(1.0)


def test_the_clock_sees_outermost_stage_ranges_and_restores_record_function() -> None:
    rf = torch.autograd.profiler.record_function
    before = (rf.__enter__, rf.__exit__)
    clock = StageClock(torch, cuda=False)
    with clock:
        clock.start()
        with record_function("text_encode"):
            pass
        with record_function("denoise"):
            with record_function("decode"):  # nested in a stage: counted once, in the outer range
                with record_function("attention"):  # not a stage
                    assert clock.current() == "denoise"
        assert clock.current() is None
        clock.stop()
    assert [s.name for s in clock.spans()] == ["text_encode", "denoise"]
    assert (rf.__enter__, rf.__exit__) == before


class FakeGraph:
    """torch.cuda.CUDAGraph's interface on the CPU: the operators run at capture (a FLOP counter sees them then);
    a replay runs the captured function again out of every dispatch mode's sight, as a real replay dispatches
    nothing."""

    def __init__(self) -> None:
        self.fn = None

    def capture_begin(self) -> None:
        pass

    def capture_end(self) -> None:
        pass

    def replay(self) -> None:
        with _disable_current_modes():
            self.fn()


class GraphedPipe:
    """A pipeline whose denoiser loop (`steps` products) is one captured graph and whose decode is eager."""

    def __init__(self, graph_cls: type, steps: int = 4) -> None:
        self.graph_cls, self.steps = graph_cls, steps
        self.transformer = torch.nn.Linear(N, N, bias=False)
        self.weight = torch.randn(N, N)
        self.static = torch.zeros(N, N)
        self.graph = None
        self.calls = 0

    def _loop(self) -> torch.Tensor:
        x = self.static
        for _ in range(self.steps):
            x = x @ self.weight
        return x

    def generate(self, requests):
        with record_function("text_encode"):
            seed = torch.tensor([float(s) for _, s in requests]).sum()
        with record_function("denoise"):
            if self.graph is None:
                self.graph = self.graph_cls()
                self.graph.capture_begin()
                self.out = self._loop()  # what the graph captured, its static output
                self.graph.capture_end()
                self.graph.fn = lambda: self.out.copy_(self._loop())
            self.static.fill_(1e-3).add_(seed * 1e-6)
            self.graph.replay()
        with record_function("decode"):
            images = (self.out @ self.weight).reshape(1, 1, N, N).expand(len(requests), 3, N, N)
        return type("Result", (), {"images": images})()


class FakeWorker:
    def __init__(self, graph_cls: type) -> None:
        self.torch, self.device, self.rows = torch, "cpu", 0
        self.graph_cls = graph_cls
        self.pipe = GraphedPipe(graph_cls)
        self.replicas = 0

    def replica(self) -> GraphedPipe:
        self.replicas += 1
        return GraphedPipe(self.graph_cls)

    def memory(self) -> dict[str, float]:
        return {"peak_rss_mb": 1.0}


def test_the_ledger_counts_replays_per_stage_and_their_captured_flops() -> None:
    pipe = GraphedPipe(FakeGraph)
    with FlopCounterMode(display=False) as counter, \
            GraphLedger(torch, flops=counter.get_total_flops, graph_cls=FakeGraph) as ledger:
        pipe.generate([("a", 1)])  # capture: the loop's operators counted once, into the graph
        since, before = ledger.mark(), counter.get_total_flops()
        pipe.generate([("a", 2)])
        dispatched = counter.get_total_flops() - before
        replayed, unseen = ledger.replayed_flops(since)
    assert dispatched == MATMUL  # the decode only: the replay hid the loop from the counter
    assert replayed == 4 * MATMUL and unseen == 0
    assert ledger.captured == {id(pipe.graph): 4 * MATMUL}
    assert FakeGraph.replay is not None and "replay" in FakeGraph.__dict__  # restored, not left wrapped
    assert FakeGraph.__dict__["replay"].__name__ == "replay"


def test_clocked_generate_puts_the_replays_in_their_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)  # what GraphLedger watches by default
    pipe = GraphedPipe(FakeGraph)
    pipe.generate([("a", 1)])
    times = clocked_generate(torch, False, lambda: pipe.generate([("a", 2)]))
    assert set(times.stage_ms) == {"text_encode", "denoise", "decode"}
    assert sum(times.stage_ms.values()) + times.outside_ms == pytest.approx(times.total_ms)
    assert times.replays == {"denoise": 1} and times.replay_device_ms == {}  # no device events on a CPU
    assert set(times.host_ms) == set(times.stage_ms)


def test_a_graphed_pipeline_is_counted_on_its_replica(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)  # what GraphLedger watches by default
    worker = FakeWorker(FakeGraph)
    worker.pipe.generate([("a", 1)])  # the worker's pipeline captured before the count, as in a profile
    flops = profiling.count_flops(worker, [("a", 1), ("b", 2)], replica=False)
    assert flops["graph_replays"] == 1 and flops["flops"] == MATMUL and flops["flops_method"] == "dispatched"
    flops = profiling.count_flops(worker, [("a", 1), ("b", 2)], replica=True)
    assert flops["flops"] == 5 * MATMUL and flops["flops_method"] == "replica" and worker.replicas == 1
    raw = profiling.profile_generate(worker, [("a", 1), ("b", 2)], repeats=3)
    assert raw["clocked"]["replays"] == {"denoise": 1}  # the replay ran inside the denoise range
    assert raw["flops"] == 5 * MATMUL and raw["denoiser_rows_per_image"] == 0
    summary = profiling.summarize(raw, profiling.roofline.Peak("cpu", 1.0, None, "fp32", "test"), 4, 2)
    assert summary["flops_method"] == "replica" and summary["stage_basis"] == "critical_path"
    parts = sum(summary["stage_ms"].values())
    assert parts == pytest.approx(summary["total_ms"])  # the stages and the rest are the latency
    info = {"summary": summary, "lane_id": "x", "device": "cpu", "commit": "c", "trace": None, "json": "j",
            "commands": {}}
    text = "\n".join(profiling.format_table(info))
    assert "1 CUDA graph replays" in text and "a replica of the same candidate" in text and "dominant stage:" in text
