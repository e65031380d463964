"""The fleet's parts that need no cluster: the one-writer guard, the judge's archive, the driver's retry rule (with
an in-process stand-in executor), the echo of the judge's output, the records, and that a local session never
imports Ray. The cluster tests are tests/e2e/test_fleet_*.py."""

from __future__ import annotations

import builtins
import io
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status
from pytest_dit_ar.fleet import archive, dispatch
from pytest_dit_ar.fleet.dispatch import PREPARE, RUN, Dispatch
from pytest_dit_ar.fleet.judging import Echo, Judging
from pytest_dit_ar.fleet.request import JudgeLost, JudgeReply, JudgeRequest, Placement, Prepared, ReplicaPayload
from pytest_dit_ar.fleet.usage import SessionUsage, fleet_best
from pytest_dit_ar.loop import conclusion
from pytest_dit_ar.state import gitops, ledger
from pytest_dit_ar.state.best import Measurements
from pytest_dit_ar.state.ledger import LedgerRow
from pytest_dit_ar.state.paths import StatePaths

PROJECT = Path(__file__).resolve().parents[2]
ROW = LedgerRow("now", "run-1", "lane", "c" * 40, "p" * 40, Status.KEEP, description="an idea")


@pytest.mark.parametrize("variable", ["DIT_AR_JUDGE", "RAY_RAYLET_PID"])
def test_a_judge_process_writes_no_ledger_ref_or_reset(variable: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "results.tsv"
    ledger.append(path, ROW)  # the session's own process: written
    monkeypatch.setenv(variable, "1")
    with pytest.raises(Refused, match="written by the session's own process only"):
        ledger.append(path, ROW)
    with pytest.raises(Refused, match="the session's own process"):
        gitops.set_ref(None, "refs/autoresearch/x/best/lane", "0" * 40)
    with pytest.raises(Refused, match="the session's own process"):
        gitops.reset_to(None, "0" * 40, ("model_under_test/",))
    assert len(ledger.read(path)) == 1


def _tar(members: dict[str, bytes], link: str = "") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
    return buffer.getvalue()


def _file(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "archive.tar.gz"
    path.write_bytes(data)
    return path


def test_a_judges_archive_unpacks_only_where_its_kind_may_write(tmp_path: Path) -> None:
    allowed = archive.allowed_members(StatePaths(tmp_path), "experiment", "run-1", "lane")
    written = archive.unpack(_file(tmp_path, _tar({".autoresearch/runs/run-1/perf.json": b"{}"})), tmp_path, allowed)
    assert written == [".autoresearch/runs/run-1/perf.json"] and (tmp_path / written[0]).read_bytes() == b"{}"
    for bad in ({".autoresearch/results.tsv": b"forged"}, {".autoresearch/runs/run-1/../../best.json": b"{}"},
                {".autoresearch/baseline/lane/manifest.json": b"{}"}):
        with pytest.raises(Refused, match="outside what it may return"):
            archive.unpack(_file(tmp_path, _tar(bad)), tmp_path, allowed)
    with pytest.raises(Refused, match="not a regular file"):
        archive.unpack(_file(tmp_path, _tar({}, link=".autoresearch/runs/run-1/link")), tmp_path, allowed)
    assert not (tmp_path / ".autoresearch" / "results.tsv").exists()
    assert archive.allowed_members(StatePaths(tmp_path), "baseline", "r", "lane")[1] == ".autoresearch/baseline/lane"


def test_the_echo_holds_back_the_judges_last_line() -> None:
    out: list[str] = []
    echo = Echo(out.append)
    echo.feed(b"collected 42 items\nquality ")
    echo.feed(b"ok\nVERDICT: KEEP\n")
    assert out == ["collected 42 items\n", "quality ok\n"] and echo.close() == "VERDICT: KEEP"


def test_an_outcome_and_a_dispatch_survive_their_files(tmp_path: Path) -> None:
    from perf_suite.sequential import PairSpread

    outcome = conclusion.ExperimentOutcome(ROW, ("why",), 12.5, Measurements(90.0, 95.0), {"seconds": {"a": 1.0}},
                                           PairSpread(4, 0.01, 0.002))
    conclusion.write(outcome.with_provenance("attempt 2", {"fleet": {"node": "n"}}), tmp_path)
    back = conclusion.read(tmp_path)
    assert back is not None and back.row.flags == "attempt 2" and back.details["fleet"] == {"node": "n"}
    assert back.spread == outcome.spread and back.measurements == outcome.measurements and back.keep
    paths = StatePaths(tmp_path)
    record = Dispatch("experiment", "run-1", "judge:f:t:run-1:1", "f:slot-0", 1, RUN, 1.0, "c" * 40, "p" * 40)
    dispatch.write(paths, record)
    assert dispatch.read(paths) == record
    dispatch.clear(paths)
    assert dispatch.read(paths) is None


# -- the driver's retry rule, with an in-process stand-in for the executor ----------------------------------
PLACE = Placement("node-1", "host-1", 1, ("0",), 0.0)
REQUEST = JudgeRequest("experiment", "run-1", "f", "t", "lane", "f:slot-0", 1, 1.0, "config/autoresearch.json", ())
PAYLOAD = ReplicaPayload(b"", "autoresearch/t", "c" * 40, {}, {})


@dataclass
class FakeJudge:
    lose_in: str = ""  # "prepare" or "run": JudgeLost there
    name: str = "judge"
    calls: list[str] = field(default_factory=list)
    state_now: str = "idle"

    def prepare(self, payload: ReplicaPayload) -> Prepared:
        self.calls.append("prepare")
        if self.lose_in == "prepare":
            raise JudgeLost("node-lost", "gone")
        return Prepared(PLACE, "", 0.0)

    def start(self) -> None:
        self.calls.append("start")

    def state(self) -> str:
        return self.state_now

    def result(self, timeout_s: float) -> JudgeReply | None:
        if self.lose_in == "run":
            raise JudgeLost("node-lost", "gone")
        return JudgeReply(0, "VERDICT: KEEP", PLACE, 1.0)

    def output(self, offset: int) -> bytes:
        return b""

    def progress(self) -> bytes | None:
        return None

    def chunk(self, index: int) -> bytes:
        return b""

    def release(self) -> None:
        self.calls.append("release")


@dataclass
class FakeExecutor:
    judges: list[FakeJudge]
    made: list[JudgeRequest] = field(default_factory=list)

    def judge(self, request: JudgeRequest) -> FakeJudge:
        self.made.append(request)
        return self.judges[len(self.made) - 1]

    def attach(self, name: str) -> FakeJudge | None:
        return self.judges[0] if self.judges else None


def _judging(executor: FakeExecutor, tmp_path: Path) -> Judging:
    return Judging(executor, StatePaths(tmp_path), out=lambda _: None, echo=None)


def _record() -> Dispatch:
    return Dispatch("experiment", "run-1", "", "f:slot-0", 1, PREPARE, 0.0, "c" * 40, "p" * 40)


def test_lost_before_candidate_code_is_judged_again_once_then_refused(tmp_path: Path) -> None:
    executor = FakeExecutor([FakeJudge("prepare"), FakeJudge()])
    judged = _judging(executor, tmp_path).send(REQUEST, _record(), lambda: PAYLOAD)
    assert judged.reply is not None and judged.dispatch.attempt == 2 and judged.dispatch.phase == RUN
    assert [r.attempt for r in executor.made] == [1, 2] and executor.made[1].actor.endswith(":2")
    twice = FakeExecutor([FakeJudge("prepare"), FakeJudge("prepare")])
    with pytest.raises(Refused, match="lost 2 times before the candidate's code ran"):
        _judging(twice, tmp_path).send(REQUEST, _record(), lambda: PAYLOAD)
    assert dispatch.read(StatePaths(tmp_path)) is None


def test_lost_after_candidate_code_started_is_never_judged_again(tmp_path: Path) -> None:
    executor = FakeExecutor([FakeJudge("run"), FakeJudge()])
    judged = _judging(executor, tmp_path).send(REQUEST, _record(), lambda: PAYLOAD)
    assert judged.reply is None and judged.dispatch.phase == RUN and len(executor.made) == 1
    assert judged.lost is not None and judged.lost.cause == "node-lost"  # a harness error, named
    assert dispatch.read(StatePaths(tmp_path)).phase == RUN  # on disk until the driver has said so
    baseline = FakeExecutor([FakeJudge("run"), FakeJudge()])  # a baseline runs no candidate code: judged again
    again = _judging(baseline, tmp_path).send(JudgeRequest(**{**REQUEST.__dict__, "kind": "baseline"}),
                                              Dispatch(**{**_record().__dict__, "kind": "baseline"}), lambda: PAYLOAD)
    assert again.reply is not None and again.dispatch.attempt == 2


def test_a_successor_drops_a_judging_that_never_started_and_names_one_lost_after(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path)
    idle = FakeJudge(state_now="prepared")
    dispatch.write(paths, _record().moved(phase=RUN))
    assert _judging(FakeExecutor([idle]), tmp_path).attach(dispatch.read(paths)) is None
    assert idle.calls == ["release"] and dispatch.read(paths) is None
    dispatch.write(paths, _record().moved(phase=RUN))
    lost = _judging(FakeExecutor([]), tmp_path).attach(dispatch.read(paths))
    assert lost is not None and lost.reply is None and lost.lost is not None  # gone after the verb started: a
    assert lost.lost.cause == "judge-died"  # harness error the driver names (never the candidate's CRASH)
    dispatch.write(paths, _record())
    assert _judging(FakeExecutor([]), tmp_path).attach(dispatch.read(paths)) is None  # gone before: nothing


def test_the_fleets_best_is_the_largest_speedup_over_its_own_baseline() -> None:
    def usage(tag: str, speedup: float | None, lane: str = "l") -> SessionUsage:
        return SessionUsage(tag, "", "s", lane, "", 1, 1, 1.0, 1.0, 1.0, speedup, "b")

    best = fleet_best([usage("a", 1.2), usage("b", 1.5), usage("c", None), usage("d", 1.1, "other")])
    assert best["l"].tag == "b" and best["other"].tag == "d"


def test_a_local_session_never_imports_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local executor is the default and imports no Ray: parsing every verb and routing a local session."""
    seen: set[str] = set()
    real = builtins.__import__

    def recording(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002, ANN001 - its signature
        if level == 0:
            seen.add(name.split(".")[0])
        return real(name, globals, locals, fromlist, level)

    monkeypatch.delitem(sys.modules, "ray", raising=False)
    monkeypatch.setattr(builtins, "__import__", recording)
    from pytest_dit_ar.cli.main import build_parser
    from pytest_dit_ar.fleet.route import remote_choice

    build_parser()
    assert remote_choice(PROJECT / "config" / "autoresearch.json") is None
    assert "ray" not in seen and "ray" not in sys.modules


@pytest.mark.parametrize("status", [Status.KEEP, Status.DISCARD_PERFORMANCE])
def test_a_row_recorded_before_the_driver_died_is_finished_never_recorded_again(status: Status, tmp_path: Path) -> None:
    """The driver died after the ledger row: its successor moves the best (a keep) or resets (a discard), and writes
    no second row, whatever the judge (gone) would say."""
    from pytest_dit_ar.fleet.driver import Driver
    from tests.helpers.fleet import CONFIG, candidate, stub_session
    from tests.helpers.loop import git, ledger_rows, make_project_copy

    tree = stub_session(make_project_copy(tmp_path / "repo"), "died", "unused", "died:slot-0")
    parent = git(tree, "rev-parse", "HEAD")
    commit = candidate(tree, "\n# an idea\n")
    row = LedgerRow("now", "run-1", "dit-xl2-256", commit, parent, status, metric="latency_ms", candidate=90.0,
                    run_dir=".autoresearch/runs/run-1")
    ledger.append(StatePaths(tree).ledger, row)
    dispatch.write(StatePaths(tree), _record().moved(commit=commit, parent=parent, phase=RUN, actor="gone"))
    driver = Driver(tree / CONFIG, FakeExecutor([]), out=lambda _: None, echo=None)
    assert driver.reattach(wait=True) == status.exit_code
    assert [r.run_id for r in ledger_rows(tree) if r.status.is_experiment] == ["run-1"]
    best = git(tree, "rev-parse", "refs/autoresearch/died/best/dit-xl2-256")
    assert (best, git(tree, "rev-parse", "HEAD")) == ((commit, commit) if status is Status.KEEP else (parent, parent))
    assert dispatch.read(StatePaths(tree)) is None and driver.reattach(wait=True) is None


def test_ci_fails_rather_than_skips_without_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under CI=1 a missing Ray is an error naming the install line, not a skip; elsewhere it is a skip."""
    import builtins

    from tests.helpers.ray_required import require_ray

    real = builtins.__import__

    def no_ray(name, *args, **kwargs):  # noqa: ANN001, ANN202
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError("No module named 'ray'", name="ray")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    monkeypatch.setenv("CI", "1")
    with pytest.raises(RuntimeError, match=r"\.\[test,ray\]"):
        require_ray()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        require_ray()
