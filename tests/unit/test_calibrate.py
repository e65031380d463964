"""`dit-ar calibrate` and the session's noise state: one-line refusals (no session, a lane that cannot run
here, too little time for one pair), a profile stored only after a complete run, the pool restarted on a
new best, and the bound the next experiment gets."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dit_ar_contract.config import PerfProtocol
from perf_suite.sequential import PairSpread
from perf_suite.studies import NULL, StudyArm, StudyPair, StudyResults
from pytest_dit_ar.cli.main import main
from pytest_dit_ar.loop.speed import calibration
from pytest_dit_ar.state.noise import LaneNoise, NoiseProfile, read_noise, record_spread, store_profile
from pytest_dit_ar.state.paths import StatePaths
from tests.helpers.loop import PROJECT


def project(tmp_path: Path, lane: str | None = "embedded-cpu") -> Path:
    """A config, its corpora and (unless lane is None) a session record, in a git repo with one commit."""
    raw = json.loads((PROJECT / "config" / "autoresearch.json").read_text())
    (tmp_path / "config").mkdir()
    for spec in raw["lanes"].values():
        for corpus in filter(None, (spec["corpus"], spec.get("holdout_corpus"))):
            dest = tmp_path / corpus
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT / corpus, dest)
    (tmp_path / "config" / "autoresearch.json").write_text(json.dumps(raw))
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.email=t@e.invalid", "-c", "user.name=t", "commit", "-q",
                    "--allow-empty", "-m", "init"], check=True)
    if lane:
        state = tmp_path / ".autoresearch"
        state.mkdir()
        (state / "session.json").write_text(json.dumps({
            "tag": "t", "branch": "autoresearch/t", "lane": lane, "lane_id": lane, "device": None, "on_target": False,
            "baseline_commit": "0" * 40, "init_time": "now", "config": "config/autoresearch.json",
            "config_sha256": "", "layout": 2}))
    return tmp_path / "config" / "autoresearch.json"


def collected(pairs: int = 6, rounds: int = 12, sigma_b: float = 0.01, stopped: bool = False,
              seed: int = 0) -> calibration.Collected:
    rng = np.random.default_rng(seed)
    segs = []
    for _ in range(pairs):
        off = sigma_b * rng.standard_normal()
        best = 0.15 * np.exp(0.04 * rng.standard_normal(rounds))
        cand = 0.15 * np.exp(off + 0.04 * rng.standard_normal(rounds))
        segs.append(StudyPair(tuple(cand), tuple(best)))
    results = StudyResults("embedded-cpu", "embedded-cpu", {}, 8, 1, {}, {NULL: StudyArm(NULL, tuple(segs))},
                           stopped="deadline" if stopped else None)
    return calibration.Collected(results, pairs)


def calibrate(config: Path, *args: str) -> int:
    return main(["--config", str(config), "calibrate", *args])


def test_without_a_session_calibrate_refuses_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert calibrate(project(tmp_path, lane=None)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no session" in err and "init" in err


def test_a_lane_that_cannot_run_here_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from dit_ar_contract import device

    monkeypatch.setattr(device, "list_gpus", lambda: [])
    assert calibrate(project(tmp_path, lane="dit-xl2-256")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot run here" in err and "dit-xl2-256" in err


def test_too_little_time_for_one_pair_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = project(tmp_path)
    assert calibrate(config, "--budget-s", "2") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--budget-s 2 is too little time for one pair" in err
    assert calibrate(config, "--speedups", "5,x") == 2
    assert "--speedups" in capsys.readouterr().err


def test_only_a_complete_calibration_replaces_the_profile(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    config = project(tmp_path)
    paths = StatePaths(tmp_path)
    runs = iter([collected(stopped=True), KeyboardInterrupt(), collected(sigma_b=0.0, seed=1)])

    def fake_collect(*args, **kwargs) -> calibration.Collected:
        got = next(runs)
        if isinstance(got, BaseException):
            raise got
        return got

    monkeypatch.setattr(calibration, "collect", fake_collect)
    old = calibration.profile_of(collected(seed=5), "embedded-cpu", "abc", PerfProtocol(), "latency_ms")
    store_profile(paths, old)
    assert calibrate(config, "--budget-s", "100") == 1  # stopped by the budget
    assert "incomplete: 6 of 8" in capsys.readouterr().out
    with pytest.raises(KeyboardInterrupt):
        calibrate(config, "--budget-s", "100", "--pairs", "6")
    assert read_noise(paths, "embedded-cpu").profile == old  # both left the previous profile in place
    assert calibrate(config, "--budget-s", "100", "--pairs", "6") == 0
    out = capsys.readouterr().out
    new = read_noise(paths, "embedded-cpu").profile
    assert new is not None and new != old and new.pairs == 6 and new.rounds == 12
    assert "a 5% win needs about" in out or "a 5% win is not detected" in out
    assert (tmp_path / ".autoresearch" / "calibration-embedded-cpu.png").stat().st_size > 1000


def test_the_profile_is_the_prior_and_the_pool_restarts_on_a_new_best(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path)
    protocol = PerfProtocol(bound_min_df=7)
    empty = read_noise(paths, "lane")
    assert empty == LaneNoise("lane") and empty.bound(protocol, "cpu").pct == pytest.approx(2.5)
    assert empty.bound(PerfProtocol(offset_bound_pct=4.0), "cuda").pct == pytest.approx(4.0)
    profile = calibration.profile_of(collected(pairs=8, sigma_b=0.0), "lane", "best1", protocol, "latency_ms")
    store_profile(paths, profile)
    noise = read_noise(paths, "lane").against("best1")
    assert noise.bound(protocol, "cpu").df == 7  # the calibration of this very best is pooled spread
    assert read_noise(paths, "lane").against("best2").bound(protocol, "cpu").pct == pytest.approx(profile.bound_pct)
    for i in range(3):
        record_spread(paths, "lane", "best2", f"run{i}", PairSpread(4, 1e-5, 1e-5))
    learned = read_noise(paths, "lane")
    assert learned.best_commit == "best2" and len(learned.spreads) == 3
    assert learned.bound(protocol, "cpu").source == "pooled from 3 experiments (9 df)"
    record_spread(paths, "lane", "best3", "run9", PairSpread(4, 1e-5, 1e-5))  # a new best: the pool restarts
    assert [e.run_id for e in read_noise(paths, "lane").spreads] == ["run9"]
    assert read_noise(paths, "lane").profile == profile  # the machine's profile stays


def test_the_profile_reports_the_rounds_a_win_needs(tmp_path: Path) -> None:
    quiet = calibration.profile_of(collected(sigma_b=0.0, seed=2), "l", "c", PerfProtocol(), "latency_ms")
    noisy = calibration.profile_of(collected(sigma_b=0.05, seed=2), "l", "c", PerfProtocol(), "latency_ms")
    assert quiet.bound_pct < noisy.bound_pct
    assert quiet.rounds_for["10"] <= quiet.rounds_for["5"] <= (quiet.rounds_for["3"] or math.inf)
    assert NoiseProfile.from_dict(json.loads(json.dumps(quiet.as_dict()))) == quiet
    assert noisy.rounds_for["3"] is None or noisy.rounds_for["3"] >= quiet.rounds_for["3"]


def test_the_default_budget_holds_long_calibration_pairs_at_the_best_latency() -> None:
    from dit_ar_contract.config import PerfProtocol
    from pytest_dit_ar.loop.speed.calibration import budget_s

    p = PerfProtocol(rounds=16, warmup_rounds=3)
    assert budget_s(p, None, True, 16, 48) == 900.0  # no best measured yet
    assert budget_s(p, 100.0, True, 8, 16) == 900.0  # short pairs fit the old default
    long = budget_s(p, 624.0, True, 16, 48)  # the H100's eager generate, 16 pairs of 48 rounds
    assert long >= 1.3 * 16 * 48 * 2 * 0.624 and long % 100 == 0
