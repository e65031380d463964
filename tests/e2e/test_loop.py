"""End-to-end tests of the research loop on the embedded CPU lane, each in its own git repo."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dit_ar_contract.status import Status
from pytest_dit_ar.loop.speed.patching import wrap_build, wrap_generate
from pytest_dit_ar.state.runs import RunPaths
from tests.helpers.loop import batch_cfg, commit_change, env_for, experiment, git, last_line, ledger_rows, run, set_slow

pytestmark = pytest.mark.slow


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD")


def state_snapshot(repo: Path) -> tuple:
    state = repo / ".autoresearch"
    return (head(repo), (state / "results.tsv").read_bytes(), (state / "best.json").read_bytes(),
            git(repo, "status", "--porcelain"))


def assert_refused(proc: subprocess.CompletedProcess, before: tuple, repo: Path, *words: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    for word in words:
        assert word in out, f"{word!r} not in output:\n{out}"
    assert state_snapshot(repo) == before, "a refusal changed git or state"


# -- verdicts --------------------------------------------------------------------------------

def test_faster_exact_commit_is_kept_and_a_manual_reset_is_recoverable(loop_repo: Path) -> None:
    parent = head(loop_repo)
    # a large real speedup (the sleep removed, both guidance passes in one forward: about 45% on a quiet 2-core
    # machine), decisive under load too, where the sleep alone (10-16% of a loaded round) was left inconclusive
    batch_cfg(loop_repo)
    sha = set_slow(loop_repo, 0.0, "remove the avoidable delay and batch the guidance passes")
    proc = experiment(loop_repo, "exact", "remove the avoidable delay and batch the guidance passes")
    assert last_line(proc) == "VERDICT: KEEP", proc.stdout + proc.stderr
    assert proc.returncode == 0
    assert "\r" not in proc.stdout  # no progress bar when the output is not a terminal
    assert head(loop_repo) == sha
    best = json.loads((loop_repo / ".autoresearch/best.json").read_text())["embedded-cpu"]
    assert best["commit"] == sha
    assert git(loop_repo, "rev-parse", "refs/autoresearch/t1/best/embedded-cpu") == sha
    row = ledger_rows(loop_repo)[-1]
    assert row.status is Status.KEEP and row.commit == sha and row.improvement_pct > 2.0
    assert git(loop_repo / ".autoresearch/worktrees/best", "rev-parse", "HEAD") == sha
    noise = json.loads((loop_repo / ".autoresearch/noise.json").read_text())["embedded-cpu"]
    assert noise["best_commit"] == parent and noise["spreads"][0]["pairs"] >= 2  # pooled against the old best
    # segment 1 is the quality run's exec'd pair, every later pair came from the fork servers; orders alternate
    perf = json.loads((loop_repo / row.run_dir / "perf.json").read_text())
    segments = perf["segments"]
    assert len(segments) >= 2 and not segments[0]["forked"]
    assert all(s["forked"] and set(s["ready_s"]) == {"cand", "best"} for s in segments[1:]), segments
    assert all(a != b for s in segments for a, b in zip(s["orders"], s["orders"][1:]))
    assert [r["order"] for r in segments[0]["rounds"]] == segments[0]["orders"]
    times = perf["pool"]["fork_times"]
    assert len(times["candidate"]["zygote_ready_s"]) == 1 and len(times["best"]["fork_ready_s"]) == len(segments) - 1
    assert "workers: " in proc.stdout and "forked" in proc.stdout
    # a mistaken extra reset by hand is detected by status and undone by recover
    git(loop_repo, "reset", "-q", "--hard", "HEAD^")
    info = json.loads(run(loop_repo, "status", "--json", check=True).stdout)
    assert "BEHIND" in info["head_relation"] and info["fix"]
    run(loop_repo, "recover", check=True)
    assert head(loop_repo) == sha


@pytest.mark.extended  # CI's 15-minute budget (design note 42); the full end-to-end tier runs it
def test_slower_commit_is_discarded_and_reset(loop_repo: Path) -> None:
    parent = head(loop_repo)
    set_slow(loop_repo, 0.3, "add a delay")
    proc = experiment(loop_repo, "exact", "add a delay")
    assert last_line(proc) == "VERDICT: DISCARD-PERFORMANCE", proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert head(loop_repo) == parent
    assert ledger_rows(loop_repo)[-1].status is Status.DISCARD_PERFORMANCE


@pytest.mark.extended  # CI's 15-minute budget; the full end-to-end tier runs it
def test_output_corruption_is_a_quality_discard(loop_repo: Path) -> None:
    parent = head(loop_repo)
    commit_change(loop_repo, "model_under_test/__init__.py", wrap_generate("q", """\
        out = _gen(requests)
        out.images = (out.images + 0.2).clamp(0, 1)
        return out"""), "brighten the output")
    proc = experiment(loop_repo, "exact", "brighten the output")
    assert last_line(proc) == "VERDICT: DISCARD-QUALITY", proc.stdout + proc.stderr
    assert "psnr_db" in proc.stdout
    live = proc.stdout.find("dit-ar: [")  # the phases, one line each in this pipe, written while the tests ran
    assert 0 <= live < proc.stdout.find("quality: candidate corpus") < proc.stdout.find("= FAILURES ="), proc.stdout
    assert head(loop_repo) == parent
    assert ledger_rows(loop_repo)[-1].status is Status.DISCARD_QUALITY


def test_commit_to_fixed_path_is_a_scope_discard(loop_repo: Path) -> None:
    parent = head(loop_repo)
    commit_change(loop_repo, "quality_suite/gates.py", "\n# loosen the gate\n", "touch the gate")
    proc = experiment(loop_repo, "exact", "touch the gate")
    assert last_line(proc) == "VERDICT: DISCARD-SCOPE", proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert "git cherry-pick -n" in proc.stdout + proc.stderr  # the way back is printed
    assert head(loop_repo) == parent
    assert ledger_rows(loop_repo)[-1].status is Status.DISCARD_SCOPE


TAMPER = """\
import pathlib
gates = pathlib.Path(spec["root"]) / "quality_suite" / "gates.py"
gates.write_text(gates.read_text() + "\\n# tampered at run time\\n")
return _build_{tag}(spec)"""


@pytest.mark.extended
def test_writing_a_fixed_file_at_run_time_is_prevented_and_unsandboxed_detected(loop_repo: Path) -> None:
    parent = head(loop_repo)
    original = (loop_repo / "quality_suite/gates.py").read_text()
    commit_change(loop_repo, "model_under_test/__init__.py", wrap_build("w", TAMPER.format(tag="w")),
                  "tamper with the gate at run time")
    sandboxed = experiment(loop_repo, "exact", "tamper at run time")  # prevented: the gate is not even visible
    assert last_line(sandboxed) == "VERDICT: CRASH", sandboxed.stdout + sandboxed.stderr
    assert head(loop_repo) == parent and (loop_repo / "quality_suite/gates.py").read_text() == original
    commit_change(loop_repo, "model_under_test/__init__.py", wrap_build("w2", TAMPER.format(tag="w2")),
                  "tamper with the gate at run time, unsandboxed")
    proc = experiment(loop_repo, "exact", "tamper at run time", "--unsandboxed")  # detected afterwards
    assert last_line(proc) == "VERDICT: DISCARD-SCOPE", proc.stdout + proc.stderr
    assert "quality_suite/gates.py" in proc.stdout
    assert head(loop_repo) == parent
    assert (loop_repo / "quality_suite/gates.py").read_text() == original


@pytest.mark.extended  # CI's time budget: test_fleet_embedded.py's crash (the same reset, judged in a slot) runs in CI
@pytest.mark.parametrize("body,word", [
    ("raise RuntimeError('kernel exploded')", "kernel exploded"),
    ("out = _gen(requests); out.images = out.images * float('nan'); return out", "NaN"),
], ids=["raises", "nan"])
def test_crashing_candidate_is_reset(loop_repo: Path, body: str, word: str) -> None:
    parent = head(loop_repo)
    commit_change(loop_repo, "model_under_test/__init__.py", wrap_generate("c", body), "crash")
    proc = experiment(loop_repo, "exact", "crash")
    assert last_line(proc) == "VERDICT: CRASH", proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert head(loop_repo) == parent
    row = ledger_rows(loop_repo)[-1]
    assert row.status is Status.CRASH
    crash = RunPaths(loop_repo / row.run_dir).crash_text() or ""
    assert word in crash


# -- refusals ------------------------------------------------------------------------------

def test_refuses_dirty_tree(loop_repo: Path) -> None:
    set_slow(loop_repo, 0.0, "faster")
    (loop_repo / "model_under_test" / "scratch.py").write_text("x = 1\n")
    before = state_snapshot(loop_repo)
    assert_refused(experiment(loop_repo), before, loop_repo, "not clean", "scratch.py")


@pytest.mark.extended  # CI's 15-minute budget (design note 42); the full end-to-end tier runs it
def test_refuses_wrong_branch(loop_repo: Path) -> None:
    set_slow(loop_repo, 0.0, "faster")
    git(loop_repo, "checkout", "-q", "-b", "elsewhere")
    before = state_snapshot(loop_repo)
    assert_refused(experiment(loop_repo), before, loop_repo, "autoresearch/t1")


@pytest.mark.extended  # CI's 15-minute budget (design note 42); the full end-to-end tier runs it
def test_refuses_two_stacked_commits(loop_repo: Path) -> None:
    set_slow(loop_repo, 0.05, "one")
    set_slow(loop_repo, 0.0, "two")
    before = state_snapshot(loop_repo)
    assert_refused(experiment(loop_repo), before, loop_repo, "2 commits ahead")


def test_refuses_partial_selection(loop_repo: Path) -> None:
    set_slow(loop_repo, 0.0, "faster")
    before = state_snapshot(loop_repo)
    assert_refused(experiment(loop_repo, "exact", "partial", "-k", "aggregate"), before, loop_repo, "-k")
    env = env_for(loop_repo)
    proc = subprocess.run([sys.executable, "-m", "pytest", "--dit-ar-experiment", "--dit-ar-classification", "exact",
                           "--dit-ar-description", "one test", "quality_suite/test_quality.py::test_corpus_aggregate"],
                          cwd=loop_repo, env=env, capture_output=True, text=True, timeout=600)
    assert_refused(proc, before, loop_repo, "selects part of it")


@pytest.mark.extended
def test_refuses_tampered_baseline(loop_repo: Path) -> None:
    set_slow(loop_repo, 0.0, "faster")
    png = next((loop_repo / ".autoresearch/baseline/embedded-cpu/cases").glob("*.png"))
    png.write_bytes(png.read_bytes() + b"tampered")
    before = state_snapshot(loop_repo)
    assert_refused(experiment(loop_repo), before, loop_repo, "manifest", png.name)
    proc = run(loop_repo, "status")
    assert "DAMAGED" in proc.stdout
    assert run(loop_repo, "recover").returncode == 0
    assert "intact" in run(loop_repo, "status").stdout


def test_refuses_malformed_config(loop_repo: Path) -> None:
    set_slow(loop_repo, 0.0, "faster")
    cfg_path = loop_repo / "config/autoresearch.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["lanes"]["embedded-cpu"]["steps"] = "twenty"
    cfg_path.write_text(json.dumps(cfg))
    git(loop_repo, "stash", "-q")  # keep HEAD/state identical for the snapshot, then restore the change
    before = state_snapshot(loop_repo)
    git(loop_repo, "stash", "pop", "-q")
    proc = experiment(loop_repo)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "autoresearch.json" in out and "lanes.embedded-cpu.steps" in out and "'twenty'" in out
    git(loop_repo, "checkout", "--", "config/autoresearch.json")
    assert state_snapshot(loop_repo) == before


# -- robustness ----------------------------------------------------------------------------

@pytest.mark.extended
def test_kill_9_mid_experiment_leaves_state_usable(loop_repo: Path) -> None:
    sha = set_slow(loop_repo, 0.0, "faster")
    rows_before = ledger_rows(loop_repo)
    proc = subprocess.Popen([sys.executable, "-m", "pytest_dit_ar.cli", "experiment", "--classification", "exact",
                             "--description", "killed"], cwd=loop_repo, env=env_for(loop_repo),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    runs = loop_repo / ".autoresearch/runs"
    deadline = time.time() + 300
    while time.time() < deadline and not list(runs.glob("*/worker-*block0.log")):
        time.sleep(0.2)
    assert list(runs.glob("*/worker-*block0.log")), "the experiment never reached the timing stage"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert ledger_rows(loop_repo) == rows_before
    assert head(loop_repo) == sha
    again = experiment(loop_repo, "exact", "after the kill")
    assert last_line(again) == "VERDICT: KEEP", again.stdout + again.stderr
    assert len(ledger_rows(loop_repo)) == len(rows_before) + 1


@pytest.mark.extended
def test_two_concurrent_experiments_serialize_or_refuse(loop_repo: Path) -> None:
    set_slow(loop_repo, 0.0, "faster")
    rows_before = len(ledger_rows(loop_repo))
    args = [sys.executable, "-m", "pytest_dit_ar.cli", "experiment", "--classification", "exact",
            "--description", "race"]
    procs = [subprocess.Popen(args, cwd=loop_repo, env=env_for(loop_repo), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=600) + (p.returncode,) for p in procs]
    codes = sorted(r[2] for r in results)
    assert codes == [0, 2], results
    refused = next(r for r in results if r[2] == 2)
    assert "another experiment" in refused[0] + refused[1]
    assert len(ledger_rows(loop_repo)) == rows_before + 1
    assert ledger_rows(loop_repo)[-1].status is Status.KEEP


@pytest.mark.extended
def test_a_session_made_before_the_layered_layout_reads_and_names_the_migration(loop_repo: Path) -> None:
    path = loop_repo / ".autoresearch" / "session.json"
    data = json.loads(path.read_text())
    del data["layout"]  # as `dit-ar init` wrote it before
    path.write_text(json.dumps(data))
    set_slow(loop_repo, 0.0, "faster")
    before = state_snapshot(loop_repo)
    info = json.loads(run(loop_repo, "status", "--json", check=True).stdout)
    assert info["tag"] == "t1" and info["baseline"]["intact"]
    assert_refused(experiment(loop_repo, "exact", "faster"), before, loop_repo, "earlier layout", "init --tag NEW")
