"""`dit-ar fleet adopt` and `dit-ar fleet status` on stand-in judges (tests/helpers/fleet): a keep adopted from
another session is judged again here; a conflicting one aborts and changes nothing; status reads every session."""

from __future__ import annotations

from pathlib import Path

import pytest

from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status
from tests.helpers.fleet import CONFIG, StubWork, candidate, judged_log, stub_session
from tests.helpers.loop import git, ledger_rows, make_project_copy
from tests.helpers.ray_required import require_ray

require_ray()
# extended: CI's time budget; test_fleet_embedded.py's crash judged in a slot is the fleet's test in CI
pytestmark = [pytest.mark.ray, pytest.mark.extended]

from pytest_dit_ar.cli.main import main  # noqa: E402
from pytest_dit_ar.fleet import ray_executor, registry  # noqa: E402 - after the skip: needs Ray
from pytest_dit_ar.fleet.adopt import adopted  # noqa: E402
from pytest_dit_ar.fleet.driver import Driver  # noqa: E402
from pytest_dit_ar.state import gitops  # noqa: E402


def test_adopt_judges_a_keep_again_here_and_a_conflict_aborts_cleanly(fleet_cluster, tmp_path: Path,  # noqa: ANN001
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project_copy(tmp_path / "repo")
    slot = "ad:slot-0"
    ray_executor.create_slot(slot, 1, 1.0)
    try:
        a, b, c = (stub_session(project, f"ad-{x}", fleet_cluster.address, slot) for x in "abc")
        keep = StubWork(str(tmp_path), status="keep")

        def judge(tree: Path, description: str, adopted_from: str = "") -> int:
            executor = ray_executor.RayExecutor(fleet_cluster.address, work=keep, out=lambda _: None)
            return Driver(tree / CONFIG, executor, out=lambda _: None, echo=None).experiment(
                "exact", description, adopted_from=adopted_from)

        kept = candidate(a, "\n# cache the timestep embedding\n", "idea in A", unique=False)
        assert judge(a, "cache the timestep embedding") == 0
        commit, cls, description = adopted(b / CONFIG, "ad-a")
        assert commit == kept and cls == "exact" and description.startswith("adopted from ad-a")
        picked = git(b, "rev-parse", "HEAD")
        assert git(b, "rev-parse", "HEAD^") == git(b, "rev-parse", "refs/autoresearch/ad-b/best/dit-xl2-256")
        with pytest.raises(Refused, match="already judged"):  # the same tree against the same best, unless adopted
            judge(b, "the same, not adopted")
        assert judge(b, description, adopted_from="ad-a") == 0
        row = ledger_rows(b)[-1]
        assert row.status is Status.KEEP and row.commit == picked and row.description == description

        candidate(c, "\n# something else entirely\n", "idea in C", unique=False)
        assert judge(c, "something else") == 0
        best_c = git(c, "rev-parse", "HEAD")
        with pytest.raises(Refused, match="conflicts with this session's best") as refused:
            adopted(c / CONFIG, "ad-a")
        assert "nothing changed" in str(refused.value)
        assert git(c, "rev-parse", "HEAD") == best_c and not gitops.dirty_entries(gitops.open_repo(c))

        registry.write(gitops.open_repo(project), registry.FleetRecord(
            "ad", "dit-xl2-256", fleet_cluster.address, 1, (slot,),
            tuple(registry.FleetSession(t.name.split("repo-")[1], str(t), slot) for t in (a, b, c)), "now"))
        capsys.readouterr()
        assert main(["--config", str(project / CONFIG), "fleet", "status", "--idea", "cache timestep embeddings"]) == 0
        out = capsys.readouterr().out
        assert f"slot {slot}: idle" in out
        for tag in ("ad-a", "ad-b", "ad-c"):
            line = next(x for x in out.splitlines() if x.strip().startswith(tag))
            assert line.split()[2:4] == ["1", "1"] and line.split()[4] != "-", line  # 1 experiment, 1 keep, GPU-s
        nearest = out.split("nearest earlier descriptions")[1].splitlines()[1]
        assert "cache the timestep embedding" in nearest
        assert len(judged_log(tmp_path)) == 3  # A, B adopting, C: the refused duplicate never reached a slot
    finally:
        ray_executor.remove_slot(slot)
