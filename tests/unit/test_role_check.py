"""The side-blind A/A of the best (loop/speed/role_check.py), its record (state/roles.py) and the way back
(state/records.py `rewind_best`): when a check runs, what counts as a role difference, who introduced it, the
refusal, and the move back. The A/A itself runs in tests/e2e/test_role_check.py."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from dit_ar_contract.config import PerfProtocol
from dit_ar_contract.device import DeviceIdentity
from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status
from perf_suite.sequential import Look
from perf_suite.shift import shift
from pytest_dit_ar.loop.speed import role_check
from pytest_dit_ar.state import records, roles
from pytest_dit_ar.state.best import BestRecord
from pytest_dit_ar.state.files import write_json_atomic
from pytest_dit_ar.state.ledger import LedgerRow
from pytest_dit_ar.state.paths import StatePaths
from pytest_dit_ar.state.perf_record import PerfRecord, SegmentRecord
from pytest_dit_ar.state.session import SessionRecord

P = PerfProtocol(min_improvement_pct=2.0, alpha=0.01, role_check_fraction=0.25)
COMMITS = ("b" * 40, "k" * 40, "n" * 40)  # the baseline, the keep that brought the dependence, a no-op kept on it


def look(decision: str, est: float, lo: float, hi: float) -> Look:
    return Look(3, 18, decision, est, lo, hi, 0.0, None, 0.01, 0.01)


def perf(cand: list[float], best: list[float]) -> PerfRecord:
    half = len(cand) // 2
    segs = [SegmentRecord(i, cand[i * half:(i + 1) * half], best[i * half:(i + 1) * half]) for i in range(2)]
    segs[-1].look = look("not-faster", 0.0, -1.0, 1.0)
    return PerfRecord(False, [], segs)


def times(ms: float, n: int = 12, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [ms / 1e3 * (1 + rng.uniform(-0.02, 0.02)) for _ in range(n)]


def test_a_difference_is_the_verdicts_keep_or_an_interval_wholly_below_zero() -> None:
    assert role_check.difference(look("keep", 40.0, 30.0, 50.0), 2.0) == 1
    assert role_check.difference(look("not-faster", -40.0, -50.0, -30.0), 2.0) == -1
    assert role_check.difference(look("not-faster", -1.0, -1.8, -0.2), 2.0) == 0  # below the minimum improvement
    assert role_check.difference(look("not-faster", -3.0, -8.0, 2.0), 2.0) == 0  # the interval holds zero
    assert role_check.difference(None, 2.0) == 0


def test_a_best_slower_as_the_best_than_as_its_candidate_is_checked_at_once() -> None:
    """The red team's ratchet: the keep's candidate side ran 150 ms, the same tree as the best 400 ms (a 250 ms sleep
    whenever it was the best)."""
    then = perf(times(150), times(160, seed=1))
    now = perf(times(100, seed=2), times(400, seed=3))
    why = role_check.reason_to_check(P, then, now, "r-keep", draw=random.Random(0))
    assert why is not None and "slower as the best" in why and "r-keep" in why
    same = perf(times(100, seed=2), times(151, seed=4))
    never = SimpleNamespace(random=lambda: 1.0)
    assert role_check.reason_to_check(P, then, same, "r-keep", draw=never) is None  # noise, no draw
    assert role_check.reason_to_check(P, None, now, "r-keep", draw=never) is None  # no keep run to compare with
    always = SimpleNamespace(random=lambda: 0.0)
    assert role_check.reason_to_check(P, then, same, "r-keep", draw=always) == "drawn for 25% of experiments"
    assert role_check.reason_to_check(P, then, None, "r-keep", draw=always) is None  # nothing was timed


def test_the_draw_is_the_harness_own_secret_randomness() -> None:
    import secrets

    assert isinstance(role_check.DRAW, secrets.SystemRandom)


def test_the_shift_screen_needs_rounds_and_reads_a_slowdown() -> None:
    assert shift([0.1] * 3, [0.2] * 12) is None
    s = shift(times(100), times(130, seed=5))
    assert s is not None and 28 < s.slower_pct < 32 and s.p_value < 1e-4 and s.slower(4.0, 0.01)
    assert not shift(times(100), times(100, seed=6)).slower(4.0, 0.01)


def rows() -> list[LedgerRow]:
    return [LedgerRow("t", f"r{i}", "lane", c, "", Status.BASELINE if i == 0 else Status.KEEP)
            for i, c in enumerate(COMMITS)]


def check(commit: str, dependent: bool, run: str = "r9") -> roles.RoleCheck:
    return roles.RoleCheck(run, commit, "drawn", "t", 45.0, 35.0, 55.0, 4, 2, dependent)


def test_the_keep_named_is_the_first_since_the_last_best_that_passed_a_check() -> None:
    none = roles.LaneRoles("lane")
    found = role_check.finding_for(COMMITS, none, rows(), check(COMMITS[2], True), "r2")
    assert (found.introduced_by, found.introduced_run, found.back_to) == (COMMITS[1], "r1", COMMITS[0])
    assert found.way_back() == f"dit-ar recover --before {COMMITS[1][:10]}"
    passed_k = roles.LaneRoles("lane", (check(COMMITS[1], False),))
    found = role_check.finding_for(COMMITS, passed_k, rows(), check(COMMITS[2], True), "r2")
    assert (found.introduced_by, found.back_to) == (COMMITS[2], COMMITS[1])
    alone = role_check.finding_for(COMMITS[:1], none, rows(), check(COMMITS[0], True), "r0")
    assert alone.back_to == "" and "new session" in alone.refusal()


def test_a_marked_best_refuses_every_experiment_naming_the_keep_and_the_way_back(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path)
    roles.refuse_if_marked(paths, "lane")  # nothing recorded: no refusal
    roles.record_check(paths, "lane", check(COMMITS[1], False, "r5"))
    roles.refuse_if_marked(paths, "lane")
    finding = role_check.finding_for(COMMITS, roles.read_roles(paths, "lane"), rows(), check(COMMITS[2], True), "r2")
    roles.record_check(paths, "lane", finding.check, finding)
    with pytest.raises(Refused) as refused:
        roles.refuse_if_marked(paths, "lane")
    text = str(refused.value)
    assert "role-dependent" in text and COMMITS[2][:10] in text and f"recover --before {COMMITS[2][:10]}" in text
    assert len(roles.read_roles(paths, "lane").checks) == 2
    write_json_atomic(roles.roles_path(paths), {"lane": {"finding": {"check": "not a record"}}})
    with pytest.raises(Refused, match="does not read"):
        roles.read_roles(paths, "lane")  # an unreadable mark is a refusal, never silence


def test_the_way_back_moves_the_best_and_the_branch_and_clears_the_mark(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    paths = StatePaths(tmp_path)
    record = SessionRecord("t1", "autoresearch/t1", "lane", "lane", DeviceIdentity("cpu", "CPU"), True, COMMITS[0],
                           "t", "config/autoresearch.json", "x")
    session = SimpleNamespace(paths=paths, started=record, lane_id="lane", root=tmp_path,
                              config=SimpleNamespace(mutable_paths=("model_under_test/",)))
    best = BestRecord(COMMITS[2], "t1", "autoresearch/t1", "r2", "t", "ref", history=COMMITS)
    write_json_atomic(paths.best, {"lane": best.as_dict()})
    paths.ledger.parent.mkdir(parents=True, exist_ok=True)
    from pytest_dit_ar.state import ledger

    for row in rows():
        ledger.append(paths.ledger, row)
    finding = role_check.finding_for(COMMITS, roles.LaneRoles("lane"), rows(), check(COMMITS[2], True), "r2")
    roles.record_check(paths, "lane", finding.check, finding)
    done: list[str] = []
    monkeypatch.setattr(records.gitops, "set_ref", lambda repo, ref, sha: done.append(f"set_ref {sha}"))
    monkeypatch.setattr(records.gitops, "sync_worktree", lambda repo, path, sha: done.append(f"sync_worktree {sha}"))
    monkeypatch.setattr(records.gitops, "reset_to", lambda repo, sha, mutable: done.append(f"reset_to {sha}"))
    monkeypatch.setattr(records.gitops, "require_clean", lambda repo: None)
    monkeypatch.setattr(records.gitops, "require_branch", lambda repo, tag: None)
    with pytest.raises(Refused, match="not one keep"):
        records.rewind_best(session, None, COMMITS[0][:10])  # the baseline: nothing before it
    moved = records.rewind_best(session, None, COMMITS[1][:10])
    assert (moved.before, moved.best_was, moved.best_now) == (COMMITS[1], COMMITS[2], COMMITS[0])
    assert done == [f"set_ref {COMMITS[0]}", f"sync_worktree {COMMITS[0]}", f"reset_to {COMMITS[0]}"]
    now = records.read_best(paths)["lane"]
    assert now.commit == COMMITS[0] and now.history == COMMITS[:1] and now.run_id == "r0"
    state = roles.read_roles(paths, "lane")
    assert state.finding is None and state.rewinds[-1].before == COMMITS[1]
    roles.refuse_if_marked(paths, "lane")
