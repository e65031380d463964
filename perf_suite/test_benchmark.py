"""Generate latency of the working tree published through pytest-benchmark (DESIGN §6).

`pytest -m perf --benchmark-autosave` stores it, `--benchmark-compare` and `--benchmark-histogram`
work as usual. Each round is one worker round trip timed in this process (the worker's reply
carries host-side fingerprints of the outputs, so the device has finished), with fresh seeds.
The verdict is test_perf.py's interleaved A/B test; this one runs after it and only publishes.
"""

import random

import pytest

from pytest_dit_ar.errors import CandidateCrash
from pytest_dit_ar.workers import WorkerProcess

pytestmark = pytest.mark.perf

EXPERIMENT_ROUNDS = 3  # inside an experiment: cheap, the A/B test has decided already


def test_generate_latency(benchmark, dit_ar, dit_ar_judgement):
    """Round-trip latency of one generate of the lane's batch (fresh seeds every round)."""
    if dit_ar.experiment_mode and any(v != "passed" for k in ("quality", "perf") for v in dit_ar.outcomes[k].values()):
        pytest.skip("the candidate was already judged a discard: nothing to publish")
    j = dit_ar_judgement
    ctx = j.ctx
    prompts = [c.prompt for c in j.cases()]
    rng = random.SystemRandom()
    rounds = EXPERIMENT_ROUNDS if dit_ar.experiment_mode else int(ctx.lane.performance["rounds"])

    def draw() -> tuple[tuple, dict]:
        return ([[rng.choice(prompts), rng.randrange(2**31)] for _ in range(ctx.lane.batch)],), {}

    try:
        with WorkerProcess("candidate", ctx.root, ctx.target, ctx.threads, j.run_dir / "worker-benchmark.log",
                           float(ctx.lane.performance["round_timeout_s"])) as worker:
            worker.request("build", spec=ctx.lane.workload(ctx.root))
            for _ in range(int(ctx.lane.performance["warmup_rounds"])):
                worker.request("generate", requests=draw()[0][0])

            def round_trip(requests: list) -> None:
                if not worker.request("generate", requests=requests)["finite"]:
                    raise CandidateCrash("candidate produced NaN/Inf outputs during the benchmark")

            benchmark.group = ctx.lane_id
            benchmark.extra_info.update(lane=ctx.lane_id, batch=ctx.lane.batch, steps=ctx.lane.steps,
                                        device=worker.identity.get("name"), unit="one generate round trip")
            benchmark.pedantic(round_trip, setup=draw, rounds=rounds, iterations=1, warmup_rounds=0)
    except CandidateCrash as exc:
        if dit_ar.experiment_mode and j.crash is None:
            j.crash = exc  # a crash is a crash wherever it happens
        pytest.fail(f"candidate crashed: {exc}\n{exc.details[-3000:]}", pytrace=False)
