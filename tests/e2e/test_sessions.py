"""Sessions keep their origin (init elsewhere needs --new-baseline) and their software stack."""

from __future__ import annotations

from pathlib import Path

import pytest

from dit_ar_contract.errors import Refused
from pytest_dit_ar.state.paths import StatePaths
from pytest_dit_ar.state.session import read_record
from tests.helpers.loop import git, run, set_slow


def test_init_at_another_commit_needs_new_baseline_and_records_it(loop_repo: Path) -> None:
    origin = git(loop_repo, "rev-parse", "HEAD")
    moved = set_slow(loop_repo, 0.0, "a commit that is not the lane's baseline")
    refused = run(loop_repo, "init", "--tag", "t2", "--lane", "embedded-cpu")
    assert refused.returncode == 2 and "--new-baseline" in refused.stderr and origin[:10] in refused.stderr
    assert read_record(StatePaths(loop_repo)).tag == "t1"  # nothing changed
    accepted = run(loop_repo, "init", "--tag", "t2", "--lane", "embedded-cpu", "--new-baseline", check=True)
    assert "new baseline origin" in accepted.stdout
    record = read_record(StatePaths(loop_repo))
    assert record.baseline_commit == moved and record.new_origin_from == origin[:12]


@pytest.mark.slow
def test_an_experiment_on_another_software_stack_is_refused(loop_repo: Path, monkeypatch) -> None:
    from dit_ar_contract import versions
    from pytest_dit_ar.loop import experiment as exp_mod

    set_slow(loop_repo, 0.0, "faster")
    real = versions.collect
    monkeypatch.setattr(versions, "collect", lambda: {**real(), "torch": "99.0.0"})
    exp = exp_mod.Experiment(loop_repo / "config" / "autoresearch.json", None, "exact", "faster")
    try:
        with pytest.raises(Refused, match=r"software stack changed since the baseline \(torch .* -> 99.0.0\): "
                                          "a new baseline is needed"):
            exp.begin()
    finally:
        exp.release()
    assert not (loop_repo / ".autoresearch/results.tsv").read_text().count("faster")
