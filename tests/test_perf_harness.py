"""The performance harness against candidates that try to fool it, plus unit tests of its arithmetic.

End-to-end experiments run on the embedded-cpu lane in private project copies (each ~20 s or more);
the statistics and roofline tests are pure and fast.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from loop_helpers import commit_change, experiment, git, last_line, ledger_rows, make_project_copy, wrap_generate
from perf_suite import roofline
from perf_suite.stats import decide_block

DECIDE = {"metric": "latency_ms", "min_improvement_pct": 2.0, "alpha": 0.01, "resamples": 2000}


# build_extra: `known`, the frozen corpus seeds (the quality run uses only those; timing draws fresh ones)
CORPUS_SEEDS = """\
    import json as _json
    import pathlib as _pl
    corpus = _pl.Path(spec["root"]) / "quality_suite" / "corpus" / "embedded_digits.jsonl"
    known = {_json.loads(line)["seed"] for line in corpus.read_text().splitlines() if line.strip()}
"""


def run_record(repo: Path) -> Path:
    return repo / ledger_rows(repo)[-1][16]


def perf_reasons(repo: Path) -> str:
    return json.dumps(json.loads((run_record(repo) / "experiment.json").read_text())["reasons"])


# -- candidates that try to fool the timing ----------------------------------------------------

@pytest.mark.slow
def test_patched_clocks_cannot_hide_a_slowdown(loop_repo: Path) -> None:
    """Clocks and device syncs patched in the candidate's process do not touch the harness's clock."""
    parent = git(loop_repo, "rev-parse", "HEAD")
    commit_change(loop_repo, "model_under_test/__init__.py", wrap_generate("clock", """\
        _sleep(0.3)
        return _gen(requests)""", """\
    import time as _t
    import torch as _torch
    _sleep = _t.sleep
    _t.perf_counter = lambda _f=_t.perf_counter: _f() / 100  # time runs 100x slower in here
    _t.monotonic = lambda _f=_t.monotonic: _f() / 100
    _t.perf_counter_ns = lambda _f=_t.perf_counter_ns: _f() // 100
    _torch.cuda.synchronize = lambda *a, **k: None
"""), "patch the clocks (and add a delay)")
    proc = experiment(loop_repo, "exact", "patched clocks")
    assert last_line(proc) == "VERDICT: DISCARD-PERFORMANCE", proc.stdout + proc.stderr
    assert git(loop_repo, "rev-parse", "HEAD") == parent
    assert float(ledger_rows(loop_repo)[-1][11]) < 0  # measured slower, whatever the candidate's clocks say


@pytest.mark.slow
def test_memoising_outputs_gains_nothing(loop_repo: Path) -> None:
    """A cache keyed by (prompt, seed) never hits: every timed round draws fresh seeds."""
    commit_change(loop_repo, "model_under_test/__init__.py", wrap_generate("memo", """\
        key = tuple((str(p), int(s)) for p, s in requests)
        if key not in cache:
            cache[key] = _gen(requests)
        return cache[key]""", "    cache = {}\n"), "memoise outputs by request")
    proc = experiment(loop_repo, "exact", "memoise outputs")
    assert last_line(proc) == "VERDICT: DISCARD-PERFORMANCE", proc.stdout + proc.stderr
    perf = json.loads((run_record(loop_repo) / "perf.json").read_text())
    seeds = [s for block in perf["blocks"] for round_ in block["seeds"] for s in round_]
    assert len(seeds) == len(set(seeds)) > 0


@pytest.mark.slow
def test_same_image_for_every_request_is_caught(loop_repo: Path) -> None:
    """Real outputs for the frozen corpus, one constant image otherwise: a fingerprint collision."""
    commit_change(loop_repo, "model_under_test/__init__.py", wrap_generate("const", """\
        if all(int(s) in known for _, s in requests) or not last:
            last["out"] = _gen(requests)
            return last["out"]
        out, n = last["out"], len(requests)
        return type(out)(images=out.images[:1].expand(n, -1, -1, -1).clone(),
                         latents=out.latents[:1].expand(n, -1, -1, -1).clone())""", CORPUS_SEEDS + "    last = {}\n"), "replay one image outside the corpus")
    proc = experiment(loop_repo, "exact", "constant image")
    assert last_line(proc) == "VERDICT: DISCARD-PERFORMANCE", proc.stdout + proc.stderr
    assert "identical outputs for different requests" in perf_reasons(loop_repo)


@pytest.mark.slow
def test_worker_crash_mid_measurement_is_a_crash(loop_repo: Path) -> None:
    """os._exit in the candidate's worker on its 5th generate with fresh (harness-drawn) seeds: timing."""
    parent = git(loop_repo, "rev-parse", "HEAD")
    commit_change(loop_repo, "model_under_test/__init__.py", wrap_generate("exit", """\
        if not all(int(s) in known for _, s in requests):
            calls[0] += 1
            if calls[0] == 5:
                _os._exit(3)
        return _gen(requests)""", CORPUS_SEEDS + "    import os as _os\n    calls = [0]\n"), "exit mid-measurement")
    start = time.monotonic()
    proc = experiment(loop_repo, "exact", "exits mid-measurement")
    assert last_line(proc) == "VERDICT: CRASH", proc.stdout + proc.stderr
    assert time.monotonic() - start < 400, "the dead worker was waited for, not detected"
    assert git(loop_repo, "rev-parse", "HEAD") == parent
    crash = (run_record(loop_repo) / "crash.txt").read_text()
    assert "exit code 3" in crash
    # it died during timing: the quality run was complete, the timing never was
    assert (run_record(loop_repo) / "quality.json").exists(), "it did not die during timing"
    assert not (run_record(loop_repo) / "perf.json").exists()


@pytest.mark.slow
def test_memory_guardrail_breach_is_a_performance_discard(loop_repo: Path) -> None:
    """Peak RSS (read by the harness from /proc) above the lane's peak_memory_mb guardrail."""
    cfg = json.loads((loop_repo / "config" / "autoresearch.json").read_text())
    budget = int(cfg["lanes"]["embedded-cpu"]["guardrails"]["peak_memory_mb"])
    commit_change(loop_repo, "model_under_test/__init__.py", f'''

_build_hog = build_pipeline


def build_pipeline(spec):
    import torch
    hog = torch.ones(({budget} + 512) * 2**20 // 4)  # more than the budget, written so that it is resident
    del hog
    return _build_hog(spec)
''', "allocate more than the memory budget")
    proc = experiment(loop_repo, "exact", "allocate more than the memory budget")
    assert last_line(proc) == "VERDICT: DISCARD-PERFORMANCE", proc.stdout + proc.stderr
    assert f"exceeds the budget {budget} MB" in perf_reasons(loop_repo)


@pytest.mark.slow
def test_faster_than_the_roofline_is_flagged_and_not_kept(tmp_path: Path) -> None:
    """timing.measure with a floor no real run can beat: the block is flagged, not kept."""
    from perf_suite import timing
    from pytest_dit_ar.context import load_context
    from quality_suite.corpora import load_corpus

    repo = make_project_copy(tmp_path / "repo", slow_s=0.0)
    ctx = load_context(repo / "config" / "autoresearch.json", need_session=False)
    perf = {**ctx.lane.performance, "rounds": 3, "warmup_rounds": 0}
    prompts = [c.prompt for c in load_corpus(repo / ctx.lane.corpus)]
    side = timing.SideSpec("same", repo, ctx.lane.workload(repo))
    outcome = timing.measure(side, side, ctx.target, perf, prompts, 2, "latency_ms", {}, False, tmp_path / "logs",
                             roofline_ms=1e9, max_blocks=1)
    assert not outcome.keep
    assert any("below the roofline floor" in r for r in outcome.reasons), outcome.reasons


# -- statistics -------------------------------------------------------------------------------

def _bursty(rng: np.random.Generator, n: int, base: float = 0.1) -> np.ndarray:
    """Per-round machine state shared by both sides of a round: up to 2x bursts (MEASUREMENTS.md)."""
    return base * rng.choice([1.0, 1.0, 1.2, 1.5, 2.0], size=n)


def test_aa_noise_is_not_kept() -> None:
    rng = np.random.default_rng(1)
    kept = 0
    for _ in range(200):
        burst = _bursty(rng, 12)
        best = burst * rng.lognormal(0, 0.03, 12)
        cand = burst * rng.lognormal(0, 0.03, 12)
        kept += decide_block(list(cand), list(best), **{**DECIDE, "resamples": 300}).passes
    assert kept <= 2, f"{kept} of 200 identical A/A blocks were kept"


def test_clear_win_is_kept() -> None:
    rng = np.random.default_rng(2)
    burst = _bursty(rng, 12)
    best = burst * rng.lognormal(0, 0.03, 12)
    stats = decide_block(list(0.8 * best * rng.lognormal(0, 0.03, 12)), list(best), **DECIDE)
    assert stats.passes and 15 < stats.improvement_pct < 25
    assert stats.ci_upper_ratio < 1.0 and stats.p_value < 0.01


def test_pairing_sees_a_small_win_that_bursts_hide_from_mann_whitney() -> None:
    """A consistent 5% win under 2x round-to-round bursts: paired Wilcoxon finds it, unpaired MWU cannot."""
    rng = np.random.default_rng(3)
    burst = _bursty(rng, 12)
    best = burst * rng.lognormal(0, 0.005, 12)
    stats = decide_block(list(0.95 * best), list(best), **DECIDE)
    assert stats.p_value < 0.01 < stats.mwu_p_value
    assert stats.passes


def test_identical_or_slower_candidates_are_not_kept() -> None:
    best = [0.10, 0.12, 0.11, 0.10, 0.13, 0.10]
    same = decide_block(best, best, **DECIDE)
    assert same.p_value == 1.0 and not same.passes
    slower = decide_block([b * 1.1 for b in best], best, **DECIDE)
    assert slower.improvement_pct < 0 and not slower.passes


def test_small_but_significant_win_below_min_improvement_is_not_kept() -> None:
    rng = np.random.default_rng(4)
    best = _bursty(rng, 12) * rng.lognormal(0, 0.001, 12)
    stats = decide_block(list(0.99 * best), list(best), **DECIDE)
    assert stats.significant and not stats.passes


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
    base = {"flops_per_batch": 136e9, "device_peak_tflops": 136.0, "flops_rows_per_image": 40.0,
            "device_peak": {"measured": False}}
    assert roofline.floor_ms(base) == pytest.approx(1.0)
    assert roofline.floor_ms(base, 20.0) == pytest.approx(0.5)  # half the denoiser rows (approximate)
    assert roofline.floor_ms(base, 80.0) == pytest.approx(1.0)  # never grows
    assert roofline.floor_ms(base, 40.0, "quantization") == pytest.approx(0.5)
    measured = {**base, "device_peak": {"measured": True}}
    assert roofline.floor_ms(measured) == pytest.approx(1.0 / roofline.MEASURED_SLACK)
    assert roofline.floor_ms({"flops_per_batch": None}) is None


# -- pytest-benchmark ------------------------------------------------------------------------------

def test_synchronising_timer_is_the_default_unless_chosen() -> None:
    from types import SimpleNamespace

    from pytest_dit_ar import timers

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


@pytest.mark.slow
def test_benchmark_publishes_round_trips_with_machine_info(loop_repo: Path) -> None:
    """`pytest -m perf perf_suite/test_benchmark.py --benchmark-json` in a prepared project copy."""
    import subprocess
    import sys

    from loop_helpers import env_for

    out = loop_repo.parent / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "perf", "perf_suite/test_benchmark.py",
                           f"--benchmark-json={out}", "-p", "no:cacheprovider"], cwd=loop_repo,
                          env=env_for(loop_repo), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["machine_info"]["dit_ar_lane"] == "embedded-cpu"
    assert {"torch", "cuda", "gpus", "gpu_driver"} <= set(data["machine_info"])
    bench = data["benchmarks"][0]
    assert bench["options"]["timer"] == "synchronized_perf_counter"  # pytest-benchmark saves the bare name
    assert bench["stats"]["rounds"] == 10 and bench["extra_info"]["lane"] == "embedded-cpu"
    assert bench["stats"]["min"] > 0
    assert git(loop_repo, "status", "--porcelain") == ""


def test_roofline_evidence_uses_the_table_or_measures_and_survives_a_failed_count() -> None:
    from perf_suite import profiling
    from pytest_dit_ar.errors import CandidateCrash

    class FakeWorker:
        def __init__(self, name: str, kind: str, fail: bool = False):
            self.identity, self.fail, self.ops = {"name": name, "kind": kind}, fail, []

        def request(self, op: str, **fields) -> dict:
            self.ops.append(op)
            if self.fail:
                raise CandidateCrash("flops failed (exception): unsupported op")
            if op == "flops":
                return {"flops": 136e9, "denoiser_rows_per_image": 2.0}
            return {"n": 2048, "reps": 3, "dtype": "float32", "threads": 2, "tflops": 0.1, "bandwidth_gbs": 9.0}

    gpu = FakeWorker("NVIDIA RTX A5500", "cuda")
    ev = profiling.roofline_evidence(gpu, [["a digit", 1]])
    assert gpu.ops == ["flops"] and ev["device_peak_tflops"] == 136.0 and roofline.floor_ms(ev) == pytest.approx(1.0)
    cpu = FakeWorker("AMD EPYC", "cpu")
    ev = profiling.roofline_evidence(cpu, [["a digit", 1]])
    assert cpu.ops == ["flops", "peak"] and ev["device_peak"]["measured"] and ev["device_peak_tflops"] == 0.1
    failed = profiling.roofline_evidence(FakeWorker("AMD EPYC", "cpu", fail=True), [["a digit", 1]])
    assert roofline.floor_ms(failed) is None and "roofline flag off" in profiling.describe_roofline(failed)
    assert "GFLOP per batch" in profiling.describe_roofline(ev)
