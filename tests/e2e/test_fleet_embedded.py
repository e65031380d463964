"""Real judgings through the Ray executor on the embedded CPU lane: the session's `dit-ar experiment` is judged
in its slot on a node of a local cluster, in that node's replica, by the real harness; the verdicts are the ones a
local run gives (the attack tests' candidates, a representative subset), and the session, its git and everything
the candidate may not touch are intact.

A session here is a copy of the e2e tests' prepared session (its baseline taken locally: the nodes are this
machine, so its CPU is the slot's device) bound to a CPU slot of its own, as `init --executor ray` binds one.
CI runs the crash (a real judging in a slot, recorded and reset by the session); the attack candidates, the
unsandboxed tamper and `fleet up` with baselines taken in the slots are in the extended tier.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dit_ar_contract.status import Status
from pytest_dit_ar.loop.speed.patching import wrap_build, wrap_generate
from pytest_dit_ar.state.executor import ExecutorChoice
from pytest_dit_ar.state.paths import StatePaths
from pytest_dit_ar.state.records import write_session
from pytest_dit_ar.state.runs import RunPaths
from tests.e2e.test_attacks import VANDAL, fingerprint, judged_and_intact, survivors, wrap
from tests.helpers.loop import clone_state, commit_change, env_for, experiment, git, last_line, ledger_rows
from tests.helpers.ray_required import require_ray

ray = require_ray()
pytestmark = [pytest.mark.ray, pytest.mark.slow]

from pytest_dit_ar.fleet import ray_executor  # noqa: E402 - after the skip: needs Ray
from pytest_dit_ar.state.session import open_session  # noqa: E402

TAMPER = """\
import pathlib
gates = pathlib.Path(spec["root"]) / "quality_suite" / "gates.py"
gates.write_text(gates.read_text() + "\\n# tampered at run time\\n")
return _build_t(spec)"""


@pytest.fixture
def fleet_repo(loop_template: Path, tmp_path: Path, fleet_cluster, request: pytest.FixtureRequest) -> Path:  # noqa: ANN001
    """A copy of the prepared session, bound to a CPU slot of its own on the local cluster."""
    repo = clone_state(loop_template, tmp_path / "repo")
    slot = f"emb{abs(hash(request.node.name)) % 10**6}:slot-0"
    ray_executor.create_slot(slot, 0, 1.0)
    session = open_session(repo / "config" / "autoresearch.json")
    write_session(session, dataclasses.replace(session.started, executor=ExecutorChoice(
        "ray", fleet_cluster.address, slot, slot.split(":")[0])))
    yield repo
    ray_executor.remove_slot(slot)


def judged_elsewhere(repo: Path) -> dict:
    """Where the last row's judging ran (its fleet.json), checked to be a node's replica, not this session."""
    row = ledger_rows(repo)[-1]
    where = json.loads((repo / row.run_dir / "fleet.json").read_text())
    assert where["node"] and (repo / row.run_dir / "judge.log").is_file()
    return where


def test_a_crashing_candidate_is_judged_in_its_slot_and_reset(fleet_repo: Path) -> None:
    parent = git(fleet_repo, "rev-parse", "HEAD")
    before = fingerprint(fleet_repo)
    commit_change(fleet_repo, "model_under_test/__init__.py", wrap_generate("c", "raise RuntimeError('boom')"), "crash")
    proc = experiment(fleet_repo, "exact", "crash in the slot")
    assert last_line(proc) == "VERDICT: CRASH" and proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "boom" in proc.stdout  # the judge's output, printed by the driver
    row = ledger_rows(fleet_repo)[-1]
    assert row.status is Status.CRASH and git(fleet_repo, "rev-parse", "HEAD") == parent
    assert "boom" in (RunPaths(fleet_repo / row.run_dir).crash_text() or "")
    assert judged_elsewhere(fleet_repo)["attempt"] == 1
    assert fingerprint(fleet_repo) == before and survivors() == []
    assert not (fleet_repo / ".autoresearch" / "dispatch.json").exists()
    assert sum(r.run_id == row.run_id for r in ledger_rows(fleet_repo)) == 1


# the attack tests' candidates (tests/e2e/test_attacks.py), judged through the Ray executor: the same verdicts
ATTACKS = [
    pytest.param("model_under_test/__init__.py", wrap('''
out = _gen(requests)
out.images = torch.nn.functional.adaptive_avg_pool2d(out.images, 4)
return out''', setup="import torch"), "exact", ("VERDICT: CRASH",), id="tiny-images"),
    pytest.param("quality_suite/gates.py", "\n# loosen the gate\n", "exact", ("VERDICT: DISCARD-SCOPE",),
                 id="fixed-path"),
    pytest.param("model_under_test/__init__.py", wrap("return _gen(requests)", setup=VANDAL), "exact",
                 ("VERDICT: DISCARD-PERFORMANCE",), id="vandal"),
    pytest.param("model_under_test/__init__.py", wrap('''
calls[0] += 1
if calls[0] <= 21:
    return _gen(requests)
pipe.steps = max(1, steps // 2)
try:
    return _gen(requests)
finally:
    pipe.steps = steps''', setup="calls = [0]\nsteps = pipe.steps"), "exact", ("VERDICT: DISCARD-QUALITY",),
                 id="cheap-when-timed"),
]


@pytest.mark.extended  # CI's time budget: the crash above is the real judging in a slot that CI runs
@pytest.mark.parametrize("path,text,cls,verdicts", ATTACKS)
def test_attacks_through_the_ray_executor_get_the_same_verdicts(fleet_repo: Path, path: str, text: str, cls: str,
                                                                verdicts: tuple[str, ...]) -> None:
    commit_change(fleet_repo, path, text, "an attack")
    judged_and_intact(fleet_repo, cls, "an attack, judged in a slot", verdicts)
    judged_elsewhere(fleet_repo)


@pytest.mark.extended
def test_tampering_unsandboxed_changes_only_the_replica_and_is_a_scope_discard(fleet_repo: Path) -> None:
    """Unsandboxed, a candidate rewrites a fixed file at run time: in the judge's replica, never in the session;
    the judge's guard finds it (DISCARD-SCOPE) and the session's file is as it was."""
    original = (fleet_repo / "quality_suite/gates.py").read_text()
    commit_change(fleet_repo, "model_under_test/__init__.py", wrap_build("t", TAMPER), "tamper, unsandboxed")
    proc = experiment(fleet_repo, "exact", "tamper at run time", "--unsandboxed")
    assert last_line(proc) == "VERDICT: DISCARD-SCOPE", proc.stdout[-3000:] + proc.stderr[-2000:]
    assert (fleet_repo / "quality_suite/gates.py").read_text() == original
    assert ledger_rows(fleet_repo)[-1].flags.startswith("unsandboxed")


@pytest.mark.extended
def test_fleet_up_baselines_in_slots_then_an_experiment_in_each_worktree(loop_template: Path, tmp_path: Path,
                                                                         fleet_cluster) -> None:  # noqa: ANN001
    """`dit-ar fleet up --lane embedded-cpu --sessions 2`: two worktrees, each baseline taken in its slot, then one
    experiment in each; `fleet status` shows both sessions and `fleet down` removes the slots, keeping the rest."""
    from tests.helpers.loop import make_project_copy

    repo = make_project_copy(tmp_path / "proj")

    def dit(cwd: Path, *args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "pytest_dit_ar.cli", *args], cwd=cwd, env=env_for(cwd),
                              capture_output=True, text=True, timeout=1800)
        return proc

    up = dit(repo, "fleet", "up", "--lane", "embedded-cpu", "--sessions", "2", "--tag-prefix", "lap",
             "--address", fleet_cluster.address)
    assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-3000:]
    trees = [repo.parent / f"{repo.name}-lap-0{i}" for i in range(2)]
    for i, tree in enumerate(trees):
        assert [r.status for r in ledger_rows(tree)] == [Status.BASELINE]
        assert json.loads((tree / ledger_rows(tree)[0].run_dir / "fleet.json").read_text())["slot"].startswith("lap:")
        # a different no-op line in each: the same change (comments and layout aside) against the same best would
        # be refused as already judged
        commit_change(tree, "model_under_test/pipeline.py", f"\n_NO_OP_{i} = {i}  # a no-op change\n", "no-op")
        proc = dit(tree, "experiment", "--classification", "exact", "--description", "no-op")
        assert last_line(proc).startswith("VERDICT: "), proc.stdout[-3000:] + proc.stderr[-2000:]
        assert len(ledger_rows(tree)) == 2
    status = dit(repo, "fleet", "status", "--idea", "a no-op change")
    assert status.returncode == 0 and "lap-00" in status.stdout and "lap-01" in status.stdout, status.stdout
    down = dit(repo, "fleet", "down")
    assert down.returncode == 0 and "2 slot(s) removed" in down.stdout, down.stdout + down.stderr
    assert all(StatePaths(t).session.exists() for t in trees)
