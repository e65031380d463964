"""The benchmark's stand-in judge (lab/studies/fleet_bench.py), in a module of its own: a judge's process unpickles
it, so it imports only what a real judge's class imports (the fleet's request types); what it records with (the
conclusion and the ledger row, which pull in scipy) is imported inside the judging, whose `judge_s` includes it."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from dit_ar_contract.device import DeviceIdentity, LaneTarget
from pytest_dit_ar.fleet.request import JudgeReply, JudgeRequest, Placement, Prepared, ReplicaPayload

LANE = "dit-xl2-256"  # one GPU a judging (only named: the stand-in judges)


@dataclass
class SleepingJudge:
    """Holds its slot for `judge_s` seconds (its own imports and records included, the rest asleep), then returns
    a discard."""

    judge_s: float

    def probe(self, config, lane, placement: Placement) -> LaneTarget:  # noqa: ANN001 - Config, str
        return LaneTarget(lane, lane, "cuda:0", DeviceIdentity("cuda", "Fake GPU", "GPU-fake"), False)

    def prepare(self, request: JudgeRequest, placement: Placement, payload: ReplicaPayload) -> Prepared:
        self.head = payload.head
        self.parent = next(sha for ref, sha in payload.refs.items() if "/best/" in ref)
        return Prepared(placement, "", 0.0)

    def run(self, request: JudgeRequest, placement: Placement) -> JudgeReply:
        started = time.perf_counter()
        from dit_ar_contract.status import Status
        from pytest_dit_ar.fleet import archive
        from pytest_dit_ar.loop import conclusion
        from pytest_dit_ar.state.best import Measurements
        from pytest_dit_ar.state.ledger import LedgerRow
        from pytest_dit_ar.state.paths import StatePaths, now

        argv = list(request.argv)
        row = LedgerRow(now(), request.run_id, LANE, self.head, self.parent, Status.DISCARD_PERFORMANCE,
                        "exact", "exact", "latency_ms", description=argv[argv.index("--description") + 1],
                        run_dir=f".autoresearch/runs/{request.run_id}", reason="stand-in judge")
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = StatePaths(Path(tmp)).run(request.run_id)
            run_dir.mkdir(parents=True)
            conclusion.write(conclusion.ExperimentOutcome(row, ("stand-in",), self.judge_s, Measurements()), run_dir)
            archive.archive(Path(tmp), [f".autoresearch/runs/{request.run_id}"], Path(tmp) / "judge.tar.gz")
            self.archive = (Path(tmp) / "judge.tar.gz").read_bytes()
        time.sleep(max(0.0, self.judge_s - (time.perf_counter() - started)))
        return JudgeReply(0, "VERDICT: DISCARD-PERFORMANCE", placement, time.time(), len(self.archive))

    def output(self, offset: int) -> bytes:
        return b""

    def progress(self) -> bytes | None:
        return None

    def chunk(self, index: int) -> bytes:
        return self.archive if index == 0 else b""
