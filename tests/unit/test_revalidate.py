"""Re-validation's arithmetic and records (loop/revalidate.py), the live file (state/live.py), `dit-ar watch
--once` and `dit-ar summary --markdown` on a hand-built state directory (no worker)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status
from perf_suite.sequential import improvement_pct
from pytest_dit_ar.cli import summary as summary_verb
from pytest_dit_ar.cli import watch
from pytest_dit_ar.loop.quality import holdout
from pytest_dit_ar.loop.revalidate import (
    RECORD,
    Interval,
    Revalidation,
    Step,
    chain_product,
    cumulative_look,
    keeps_since_revalidation,
    latest_of,
    log_ratio_of,
)
from pytest_dit_ar.report.summary import markdown
from pytest_dit_ar.state import ledger
from pytest_dit_ar.state.best import BestRecord
from pytest_dit_ar.state.ledger import LedgerRow
from pytest_dit_ar.state.live import LiveFile, LiveState, Tee, read_live
from pytest_dit_ar.state.paths import StatePaths

LANE = "embedded-cpu"


@pytest.mark.parametrize("metric", ["latency_ms", "images_per_s"])
@pytest.mark.parametrize("pct", [-30.0, -1.0, 0.0, 2.5, 40.0])
def test_the_log_ratio_inverts_the_verdict_s_improvement(metric: str, pct: float) -> None:
    assert improvement_pct(log_ratio_of(pct, metric), metric) == pytest.approx(pct, abs=1e-9)


def test_the_product_of_the_steps_multiplies_their_speed_ups_and_adds_their_variances() -> None:
    steps = [Step("r1", "a", "one", "exact", 20.0, 0.02), Step("r2", "b", "two", "exact", 10.0, 0.03)]
    product = chain_product(steps, "latency_ms")
    assert product is not None
    assert product.estimate_pct == pytest.approx(100 * (1 - 0.8 * 0.9))  # times multiply: 28%, not 30%
    assert product.standard_error == pytest.approx(math.sqrt(0.02**2 + 0.03**2))
    assert product.lower_pct < product.estimate_pct < product.upper_pct
    assert chain_product([], "latency_ms") is None
    unknown = chain_product(steps + [Step("r3", "c", "three", "exact", 5.0, None)], "latency_ms")
    assert unknown is not None and unknown.standard_error is None and unknown.lower_pct == unknown.upper_pct


def test_intervals_that_do_not_overlap_disagree() -> None:
    measured = Interval.of(log_ratio_of(5.0, "latency_ms"), 0.01, "latency_ms")
    claimed = Interval.of(log_ratio_of(30.0, "latency_ms"), 0.02, "latency_ms")
    near = Interval.of(log_ratio_of(8.0, "latency_ms"), 0.02, "latency_ms")
    assert not measured.overlaps(claimed) and measured.overlaps(near) and near.overlaps(measured)
    record = revalidation(measured, claimed)
    assert record.agree is False and "do not overlap" in (record.warning() or "")
    assert revalidation(measured, near).warning() is None and revalidation(measured, None).agree is None


def revalidation(measured: Interval | None, product: Interval | None, held: holdout.HoldoutResult | None = None,
                 run_id: str = "20261201-000000-revalid-0001") -> Revalidation:
    steps = (Step("r1", "b" * 40, "drop the sleep", "exact", 25.0, 0.02),)
    return Revalidation(run_id, LANE, "b" * 40, "a" * 40, "latency_ms", measured, product, steps, 2, 12,
                        held or holdout.HoldoutResult("exact", 10, 10), "2026-12-01T00:00:00+0000")


def test_the_record_round_trips_through_its_json() -> None:
    record = revalidation(Interval.of(-0.2, 0.01, "latency_ms"), Interval.of(-0.25, 0.02, "latency_ms"),
                          holdout.HoldoutResult("numerical", 10, 8, ("psnr case x: 20 (needs >= 30)",)))
    again = Revalidation.from_dict(json.loads(json.dumps(record.as_dict())))
    assert again == record
    assert "holdout: FAILS 8/10 cases under the numerical gate" in record.headline()
    assert holdout.not_judged("exact", "no holdout").ok is None


def test_the_cumulative_look_is_the_verdict_s_own() -> None:
    look = object()
    assert cumulative_look(type("Perf", (), {"look": look})()) is look


def row(status: Status, commit: str, run_dir: str = "", improvement: float | None = None, **kw) -> LedgerRow:
    return LedgerRow(timestamp="2026-12-01T10:00:00+0000", run_id=run_dir.rsplit("/", 1)[-1] or "r", lane=LANE,
                     commit=commit, parent="", status=status, improvement_pct=improvement, run_dir=run_dir, **kw)


def test_revalidation_is_due_after_every_n_keeps() -> None:
    rows = [row(Status.BASELINE, "a"), row(Status.KEEP, "b"), row(Status.DISCARD_PERFORMANCE, "c"),
            row(Status.KEEP, "d")]
    assert keeps_since_revalidation(rows, LANE) == 2
    assert keeps_since_revalidation(rows + [row(Status.REVALIDATE, "d")], LANE) == 0
    assert keeps_since_revalidation(rows + [row(Status.REVALIDATE, "d"), row(Status.KEEP, "e")], LANE) == 1
    assert keeps_since_revalidation(rows, "other-lane") == 0


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A session: baseline a, a keep b with its perf.json, a discard c, a re-validation that disagrees."""
    root = tmp_path / "repo"
    paths = StatePaths(root)
    paths.dir.mkdir(parents=True)
    (paths.session).write_text(json.dumps({"lane_id": LANE, "tag": "night"}))
    best = BestRecord("b" * 40, "night", "autoresearch/night", "r-keep", "now", "ref", effective_class="exact",
                      history=("a" * 40, "b" * 40))
    paths.best.write_text(json.dumps({LANE: best.as_dict()}))
    base = paths.baseline(LANE)
    base.mkdir(parents=True)
    (base / "baseline.json").write_text(json.dumps({"environment": {"torch": "2.14.1", "device": {"name": "CPU x"}},
                                                    "workload": {"preset": "embedded-digits", "steps": 10}}))
    for run in ("r-keep", "r-reval"):
        (paths.runs / run).mkdir(parents=True)
    (paths.runs / "r-keep" / "perf.json").write_text(json.dumps({"look": {"estimate_pct": 25.0, "lower_pct": 20.0,
                                                                          "upper_pct": 30.0, "standard_error": 0.02}}))
    measured = Interval.of(log_ratio_of(3.0, "latency_ms"), 0.01, "latency_ms")
    record = revalidation(measured, chain_product(revalidation(None, None).steps, "latency_ms"), run_id="r-reval")
    (paths.runs / "r-reval" / RECORD).write_text(json.dumps(record.as_dict()))
    for r in (row(Status.BASELINE, "a" * 40, quality_summary="judge_accuracy=1"),
              row(Status.KEEP, "b" * 40, ".autoresearch/runs/r-keep", 25.0, declared_class="exact",
                  effective_class="exact", description="drop the sleep", quality_summary="pixel-identical"),
              row(Status.DISCARD_QUALITY, "c" * 40, description="half the steps", reason="psnr below 30"),
              row(Status.REVALIDATE, "b" * 40, ".autoresearch/runs/r-reval", 3.0)):
        ledger.append(paths.ledger, r)
    return root


def test_the_summary_is_a_pr_ready_text(state: Path) -> None:
    text = markdown(state)
    assert text.startswith("## dit-ar session night: lane embedded-cpu")
    assert f"| 1 | `{'b' * 10}` | exact | +25.00% [+20.00%, +30.00%] | pixel-identical | drop the sleep |" in text
    assert "**DISCARD-QUALITY** (1)" in text and "half the steps: psnr below 30" in text
    assert "measured cumulative speed-up: +3.00%" in text and "holdout: passes 10/10" in text
    assert "do not overlap" in text  # the warning
    assert "- device: CPU x" in text and "- torch: 2.14.1" in text
    assert latest_of(state, ledger.read(StatePaths(state).ledger)).run_id == "r-reval"


def test_the_summary_verb_writes_a_file_and_refuses_bad_input(state: Path, tmp_path: Path) -> None:
    config = state / "config" / "autoresearch.json"
    args = argparse.Namespace(config=config, lane=None, out=tmp_path / "pr.md", markdown=True)
    assert summary_verb.run(args) == 0 and "### Discarded ideas" in (tmp_path / "pr.md").read_text()
    with pytest.raises(Refused, match="is a folder"):
        summary_verb.run(argparse.Namespace(config=config, lane=None, out=tmp_path, markdown=True))
    with pytest.raises(Refused, match="no session"):
        summary_verb.run(argparse.Namespace(config=tmp_path / "x" / "config" / "a.json", lane=None, out=None,
                                            markdown=True))


def render(state: Path) -> str:
    console = Console(record=True, width=160)
    console.print(watch.frame(state, 8))
    return console.export_text()


def test_watch_shows_a_running_a_finished_and_a_crashed_experiment(state: Path) -> None:
    paths = StatePaths(state)
    assert "no experiment has run" in render(state) and "WARNING" in render(state)
    live = LiveFile.start(paths.live, "experiment", "r-now", "d" * 40, "fuse qkv", LANE, seconds=lambda: {"q": 3.0})
    live.update(phase="quality", max_segments=6)
    live.on_round(0, 3, 8)
    text = render(state)
    assert "running (process" in text and "phase timing" in text and "round 3/8" in text and "fuse qkv" in text
    live.on_look(type("L", (), {"segments": 1, "estimate_pct": 4.2, "lower_pct": -1.0, "upper_pct": 9.5})())
    assert "+4.20% [-1.00%, +9.50%]" in render(state)
    live.finish("KEEP")
    assert "finished: KEEP" in render(state)
    dead = LiveState.from_dict({**read_live(paths.live).as_dict(), "phase": "timing", "pid": _a_dead_pid()})
    paths.live.write_text(json.dumps(dead.as_dict()))
    assert "ended without a verdict" in render(state)
    paths.live.write_text("{not json")  # a reader never fails on a torn or foreign file
    assert "no experiment has run" in render(state)
    assert "drop the sleep" in render(state) and "revalidate" in render(state)


def _a_dead_pid() -> int:
    """A process id no process can have (above the kernel's largest)."""
    limit = Path("/proc/sys/kernel/pid_max")
    return (int(limit.read_text()) if limit.is_file() else 2**22) + 1


def test_watch_refuses_without_a_session_and_bad_flags(tmp_path: Path, state: Path) -> None:
    args = argparse.Namespace(config=tmp_path / "config" / "autoresearch.json", once=True, interval=1.0, rows=8)
    with pytest.raises(Refused, match="no session"):
        watch.run(args)
    args = argparse.Namespace(config=state / "config" / "autoresearch.json", once=True, interval=1.0, rows=0)
    with pytest.raises(Refused, match="--rows"):
        watch.run(args)


def test_tee_sends_the_timing_callbacks_to_both_listeners(tmp_path: Path) -> None:
    calls: list[tuple] = []

    class Listener:
        def on_round(self, *a):
            calls.append(("round", *a))

        def on_look(self, look):
            calls.append(("look", look))

    tee = Tee(Listener(), None, Listener())
    tee.on_round(0, 1, 8)
    tee.on_look("L")
    assert calls == [("round", 0, 1, 8), ("round", 0, 1, 8), ("look", "L"), ("look", "L")]


def test_the_holdout_is_judged_case_by_case_against_the_baseline_s_outputs(tmp_path: Path) -> None:
    from types import SimpleNamespace

    import torch

    from dit_ar_contract.config import load_config
    from pytest_dit_ar.loop.quality.generation import CorpusOutputs
    from quality_suite.artifacts import save_case
    from quality_suite.corpora import load_corpus
    from tests.helpers.loop import PROJECT

    lane = load_config(PROJECT / "config" / "autoresearch.json").lanes[LANE]
    cases = load_corpus(PROJECT / lane.holdout_corpus)[:3]
    session = SimpleNamespace(baseline_dir=tmp_path / "baseline", lane=lane)
    assert holdout.judge(session, cases, CorpusOutputs(), "exact", {}).note  # no holdout in the baseline yet
    gen = torch.Generator().manual_seed(0)
    base = CorpusOutputs({c.id: torch.rand(3, 32, 32, generator=gen) for c in cases},
                         {c.id: torch.randn(4, 4, 4, generator=gen) for c in cases})
    for c in cases:
        save_case(holdout.holdout_dir(session.baseline_dir), c.id, base.images[c.id], base.latents[c.id])
    envelope = {"latent_rel_l2": 0.0, "latent_max_abs": 0.0, "psnr_db": float("inf"), "ssim": 1.0}
    same = holdout.judge(session, cases, base, "exact", envelope)
    assert (same.cases, same.passed, same.ok) == (3, 3, True)
    changed = CorpusOutputs(dict(base.images), dict(base.latents))
    changed.images[cases[1].id] = (base.images[cases[1].id] + 0.2).clamp(0, 1)
    changed.latents[cases[1].id] = base.latents[cases[1].id] * 1.5
    found = holdout.judge(session, cases, changed, "exact", envelope)
    assert (found.passed, found.ok) == (2, False) and cases[1].id in found.failures[0]
    assert "FAILS 2/3" in found.headline()


def test_summary_time_shows_each_experiment_s_phases(state: Path) -> None:
    """`dit-ar summary --time`: one row per experiment from its run record's phases; a run without them says so."""
    from pytest_dit_ar.state.phases import PhaseTimes

    phases = PhaseTimes.from_clock({"quality_worker_start": 4.0, "quality_corpus": 6.0, "timing_warmup": 3.0,
                                    "timing_timed": 9.0}, 25.0, warmup_rounds=5, warmup_reused=4)
    (state / ".autoresearch" / "runs" / "r-keep" / "experiment.json").write_text(
        json.dumps({"format_version": 1, "phases": phases.as_dict()}))
    assert "Where the time went" not in markdown(state)
    text = markdown(state, time=True)
    assert "| run | verdict | start up | quality corpus | quality judging | warm up | timed |" in text
    row = "| r-keep | keep | 4.0 | 6.0 | 0.0 | 3.0 | 9.0 | 0.0 | 0.0 | 0.0 | 3.0 | 25.0 | 5 | 4 generates as warm-up |"
    assert row in text  # the phases in order, harness before other, then the total
    assert "| r | discard-quality | - |" in text  # recorded without phases
