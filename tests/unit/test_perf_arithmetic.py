"""The performance arithmetic: guardrails, the roofline, the timer."""

from __future__ import annotations

import pytest

from perf_suite import guardrails, roofline

# -- roofline ------------------------------------------------------------------------------------

def test_roofline_table_and_fallback() -> None:
    assert roofline.lookup("NVIDIA RTX A5500").tflops == 136.0
    assert roofline.lookup("NVIDIA RTX A5500").bandwidth_gbs == 768.0
    assert roofline.lookup("NVIDIA H200").tflops == 790.0
    assert roofline.lookup("NVIDIA GeForce RTX 4090") is None
    peak = roofline.measured_peak("some cpu", {"n": 2048, "reps": 3, "dtype": "float32", "threads": 2,
                                               "tflops": 0.1, "bandwidth_gbs": 10.0})
    assert peak.measured and peak.tflops == 0.1 and "measured" in peak.source


def test_roofline_percent_math() -> None:
    flops = 136e12 * 1e-3  # one millisecond of an A5500 at its dense peak
    assert roofline.roofline_ms(flops, 136.0) == pytest.approx(1.0)
    assert roofline.achieved_tflops(flops, 2e-3) == pytest.approx(68.0)
    assert roofline.percent_of_peak(flops, 2e-3, 136.0) == pytest.approx(50.0)


def test_roofline_floor_uses_the_baseline_and_only_shrinks() -> None:
    def floor(cand_rows: float | None = None, cls: str | None = None, measured: bool = False) -> float | None:
        return roofline.floor_ms(136e9, 136.0, measured, 40.0, cand_rows, cls)

    assert floor() == pytest.approx(1.0)
    assert floor(20.0) == pytest.approx(0.5)  # half the denoiser rows (approximate)
    assert floor(80.0) == pytest.approx(1.0)  # never grows
    assert floor(40.0, "quantization") == pytest.approx(0.5)
    assert floor(measured=True) == pytest.approx(1.0 / roofline.MEASURED_SLACK)
    assert roofline.floor_ms(None, 136.0) is None


# -- pytest-benchmark ------------------------------------------------------------------------------

def test_synchronising_timer_is_the_default_unless_chosen() -> None:
    from types import SimpleNamespace

    from pytest_dit_ar.plugin import benchmark as timers

    def config(value: str, args: tuple = ()) -> SimpleNamespace:
        return SimpleNamespace(option=SimpleNamespace(benchmark_timer=value),
                               invocation_params=SimpleNamespace(args=args))

    plain = config(timers.DEFAULT_TIMER)
    timers.default_benchmark_timer(plain)
    assert plain.option.benchmark_timer == timers.TIMER
    chosen = config(timers.DEFAULT_TIMER, ("--benchmark-timer=time.perf_counter",))
    timers.default_benchmark_timer(chosen)
    assert chosen.option.benchmark_timer == timers.DEFAULT_TIMER
    a = timers.synchronized_perf_counter()
    assert timers.synchronized_perf_counter() >= a


def test_roofline_evidence_uses_the_table_or_measures_and_survives_a_failed_count() -> None:
    from dit_ar_contract.errors import CandidateCrash
    from perf_suite import profiling

    class FakeWorker:
        def __init__(self, name: str, kind: str, fail: bool = False):
            self.identity, self.fail, self.ops = {"name": name, "kind": kind}, fail, []
            self.device_name = name

        def request(self, op: str, **fields) -> dict:
            self.ops.append(op)
            if self.fail:
                raise CandidateCrash("flops failed (exception): unsupported op")
            if op == "flops":
                return {"flops": 136e9, "denoiser_rows_per_image": 2.0}
            return {"n": 2048, "reps": 3, "dtype": "float32", "threads": 2, "tflops": 0.1, "bandwidth_gbs": 9.0}

    gpu = FakeWorker("NVIDIA RTX A5500", "cuda")
    ev = profiling.roofline_evidence(gpu, [["a digit", 1]])
    assert gpu.ops == ["flops"] and ev["device_peak_tflops"] == 136.0
    assert roofline.floor_ms(ev["flops_per_batch"], ev["device_peak_tflops"]) == pytest.approx(1.0)
    cpu = FakeWorker("AMD EPYC", "cpu")
    ev = profiling.roofline_evidence(cpu, [["a digit", 1]])
    assert cpu.ops == ["flops", "peak"] and ev["device_peak"]["measured"] and ev["device_peak_tflops"] == 0.1
    failed = profiling.roofline_evidence(FakeWorker("AMD EPYC", "cpu", fail=True), [["a digit", 1]])
    assert roofline.floor_ms(failed.get("flops_per_batch"), failed.get("device_peak_tflops")) is None
    assert "roofline flag off" in profiling.describe_roofline(failed)
    assert "GFLOP per batch" in profiling.describe_roofline(ev)


# -- guardrails ------------------------------------------------------------------------------------

def test_memory_guardrail_is_an_absolute_budget() -> None:
    assert guardrails.memory(5000.0, 4000.0, 4096.0).problem == "peak memory 5000 MB exceeds the budget 4096 MB"
    assert guardrails.memory(4000.0, 4000.0, 4096.0).problem is None
    assert guardrails.memory(9e9, 1.0, None).problem is None  # no budget configured: not checked


def test_tail_latency_needs_enough_samples_and_a_tolerance() -> None:
    best = [[0.1] * 12] * 3
    assert guardrails.tail_latency([[0.2] * 12] * 3, best, None).problem is None
    few = guardrails.tail_latency([[0.2] * 10], [[0.1] * 10], 10.0)
    assert few.problem is None and "not judged" in str(few.figures["p95"])
    slow_tail = guardrails.tail_latency([[0.1] * 9 + [0.5] * 3] * 3, best, 10.0)  # a quarter of the rounds stall
    assert slow_tail.problem and "rounds resampled in pairs" in slow_tail.problem
    assert guardrails.tail_latency([[0.105] * 12] * 3, best, 10.0).problem is None
