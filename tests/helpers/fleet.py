"""The fleet's tests: a local multi-node Ray cluster with fake GPUs, sessions bound to its slots, and a stand-in
judge (`StubWork`) that does what the real one does around the verb (replica aside): it takes its slot, logs
where and when it held it, sleeps instead of judging, and hands back an outcome the driver records.

A stub session is a git worktree of one project copy with a hand-made session (no baseline: the driver never
reads it, only the judge does) on a lane of one GPU, bound to a slot; its best is the worktree's HEAD.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from dit_ar_contract.device import DeviceIdentity, LaneTarget
from dit_ar_contract.status import Status
from pytest_dit_ar.fleet import archive
from pytest_dit_ar.fleet.request import JudgeReply, JudgeRequest, Placement, Prepared, ReplicaPayload
from pytest_dit_ar.loop import conclusion
from pytest_dit_ar.loop.init_session import init
from pytest_dit_ar.state import gitops, records
from pytest_dit_ar.state.best import Measurements
from pytest_dit_ar.state.executor import ExecutorChoice
from pytest_dit_ar.state.ledger import LedgerRow
from pytest_dit_ar.state.paths import StatePaths, now
from pytest_dit_ar.state.session import open_session
from tests.helpers.loop import git

GPU_LANE = "dit-xl2-256"  # one GPU a judging; never run here (the stub judges), only named
CONFIG = Path("config/autoresearch.json")


def fake_uuid(node_id: str, gpu_id: str) -> str:
    return f"GPU-fake-{node_id[:8]}-{gpu_id}"


@dataclass
class StubWork:
    """A judge that holds its slot for `sleep_s` and returns `status`. `hold`: a folder; the judge of attempt 1
    writes `<phase>.<run_id>` there (its node id inside) when it reaches `phase` ("prepare" or "run") and waits
    until `go.<run_id>` appears."""

    log: str  # a folder: one line per judging (node, GPUs, start, end) in judged.jsonl
    sleep_s: float = 0.2
    status: str = "discard-performance"
    hold: str = ""
    hold_phase: str = ""

    def probe(self, config, lane, placement: Placement) -> LaneTarget:  # noqa: ANN001 - Config, str
        uuid = ",".join(fake_uuid(placement.node_id, g) for g in placement.gpu_ids)
        return LaneTarget(lane, lane, "cuda:0", DeviceIdentity("cuda", "Fake GPU", uuid), False)

    def _wait(self, phase: str, request: JudgeRequest, placement: Placement) -> None:
        if not self.hold or self.hold_phase != phase or request.attempt != 1:
            return
        folder = Path(self.hold)
        (folder / f"{phase}.{request.run_id}").write_text(placement.node_id)
        while not (folder / f"go.{request.run_id}").exists():
            time.sleep(0.05)

    def prepare(self, request: JudgeRequest, placement: Placement, payload: ReplicaPayload) -> Prepared:
        self._wait("prepare", request, placement)
        self.head = payload.head
        self.parent = next(sha for ref, sha in payload.refs.items() if "/best/" in ref)
        return Prepared(placement, "", 0.0)

    def run(self, request: JudgeRequest, placement: Placement) -> JudgeReply:
        start = time.time()
        self._wait("run", request, placement)
        time.sleep(self.sleep_s)
        end = time.time()
        with open(Path(self.log) / "judged.jsonl", "a") as fh:
            fh.write(json.dumps({"tag": request.tag, "run_id": request.run_id, "node": placement.node_id,
                                 "gpus": list(placement.gpu_ids), "pid": os.getpid(), "start": start, "end": end,
                                 "attempt": request.attempt}) + "\n")
        self.archive = self._archive(request, placement)
        return JudgeReply(0, f"VERDICT: {Status.from_word(self.status).verdict_word}", placement, end,
                          len(self.archive))

    def _archive(self, request: JudgeRequest, placement: Placement) -> bytes:
        argv = list(request.argv)
        row = LedgerRow(now(), request.run_id, GPU_LANE, self.head, self.parent, Status.from_word(self.status),
                        "exact", "exact", "latency_ms", 100.0, 90.0, 10.0, None, None, "stub",
                        argv[argv.index("--description") + 1], f".autoresearch/runs/{request.run_id}", "stub judge")
        outcome = conclusion.ExperimentOutcome(row, ("stub judge",), self.sleep_s, Measurements(90.0, 95.0),
                                               {"stub": {"node": placement.node_id}})
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = StatePaths(Path(tmp)).run(request.run_id)
            run_dir.mkdir(parents=True)
            conclusion.write(outcome, run_dir)
            archive.archive(Path(tmp), [f".autoresearch/runs/{request.run_id}"], Path(tmp) / "a.tar.gz")
            return (Path(tmp) / "a.tar.gz").read_bytes()

    def output(self, offset: int) -> bytes:
        return b"stub judge\n"[offset:]

    def progress(self) -> bytes | None:
        return None

    def chunk(self, index: int) -> bytes:
        return self.archive if index == 0 else b""


def stub_session(repo: Path, tag: str, address: str, slot: str) -> Path:
    """A worktree of `repo` with a session bound to `slot` on the one-GPU lane; its best is its HEAD."""
    tree = repo.parent / f"{repo.name}-{tag}"
    git(repo, "worktree", "add", "--detach", str(tree), "HEAD")
    target = LaneTarget(GPU_LANE, GPU_LANE, "cuda:0", DeviceIdentity("cuda", "Fake GPU", f"GPU-fake-{tag}"), False)
    init(tree / CONFIG, tag, GPU_LANE, out=lambda _: None, target=target,
         executor=ExecutorChoice("ray", address, slot, slot.split(":")[0]))
    session = open_session(tree / CONFIG)
    repo_obj = gitops.open_repo(tree)
    records.set_best(session, repo_obj, gitops.head_sha(repo_obj), "stub-baseline", Measurements(100.0, 110.0))
    return tree


def candidate(tree: Path, text: str, message: str = "a candidate", unique: bool = True) -> str:
    """One commit in model_under_test/ on the session's best: `text` and a line of code made of it (`unique`: the
    code names the session, so two sessions' candidates are not the same idea, which the fleet refuses as a
    duplicate; a comment alone would be a near-duplicate of every other comment-only change)."""
    target = tree / "model_under_test" / "__init__.py"
    idea = text.strip().lstrip("# ") + (f" in {tree.name}" if unique else "")
    target.write_text(target.read_text() + text + f"_IDEA = {idea!r}\n")
    git(tree, "commit", "-qam", message)
    return git(tree, "rev-parse", "HEAD")


def judged_log(folder: Path) -> list[dict]:
    path = folder / "judged.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
