"""Generate latency of the working tree published through pytest-benchmark (docs/design/speed-verdict.md).

`pytest -m perf --benchmark-autosave` stores it, `--benchmark-compare` and `--benchmark-histogram`
work as usual. Each round is one worker round trip timed in this process, with the outputs written
by the worker and read and checked by the harness (so the device has finished), with fresh seeds.
The verdict is test_perf.py's interleaved A/B test; this one only publishes, in plain runs (inside an
experiment the plugin skips it before its worker starts: the verdict's timed rounds are in perf.json).
"""

import random

import pytest

from dit_ar_contract.errors import CandidateCrash

pytestmark = pytest.mark.perf


def test_generate_latency(benchmark, dit_ar_evidence, dit_ar_worker):
    """Round-trip latency of one generate of the lane's batch (fresh seeds every round)."""
    lane = dit_ar_evidence.session.lane
    prompts = [c.prompt for c in dit_ar_evidence.cases()]
    rng = random.SystemRandom()
    rounds = lane.performance.rounds

    def draw() -> tuple[tuple, dict]:
        return ([[rng.choice(prompts), rng.randrange(2**31)] for _ in range(lane.batch)],), {}

    def round_trip(requests: list) -> None:
        dit_ar_worker.generate(requests, resolution=lane.resolution)  # NaN/Inf or a wrong shape: CandidateCrash

    benchmark.group = dit_ar_evidence.session.lane_id
    benchmark.extra_info.update(lane=dit_ar_evidence.session.lane_id, batch=lane.batch, steps=lane.steps,
                                device=dit_ar_worker.device_name, unit="one generate round trip")
    try:
        for _ in range(lane.performance.warmup_rounds):
            round_trip(draw()[0][0])
        benchmark.pedantic(round_trip, setup=draw, rounds=rounds, iterations=1, warmup_rounds=0)
    except CandidateCrash as exc:  # a crash is a crash wherever it happens
        dit_ar_evidence.record_crash(exc)
        pytest.fail(f"candidate crashed: {exc}\n{exc.details[-3000:]}", pytrace=False)
