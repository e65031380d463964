"""Whether the quality run's two workers time the first segment (`performance.time_quality_pair`).

On a CUDA lane the candidate's quality worker, which generated the corpus, ran the audit and the further cases,
timed slower than fresh forks of the same tree (lab/notebook/gpu-ladder.md), so "auto" closes that pair there and
every timed pair is fresh; on a CPU lane "auto" keeps it (one process start saved)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from dit_ar_contract.config import PerfProtocol
from pytest_dit_ar.loop import candidate
from pytest_dit_ar.loop.candidate import CandidateWorkers


class FakePair:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _measure_with(monkeypatch: pytest.MonkeyPatch, setting: str, is_cuda: bool) -> tuple[FakePair, Any, int]:
    seen: dict[str, Any] = {}

    def fake_measure(plan: Any, launcher: Any, first_pair: Any = None, **_: Any) -> str:
        seen["first_pair"] = first_pair
        return "perf"

    monkeypatch.setattr(candidate, "measure", fake_measure)
    workers = object.__new__(CandidateWorkers)
    pair = FakePair()
    workers.first_pair, workers.forks, workers.launcher, workers.warmup_reused = pair, None, None, 7
    workers.next = candidate.warm_servers.NextKeeper()  # no early keeper of the next experiment to wait for
    workers.warm = FakePair()  # the adopted warm fork servers (none here): closed with the experiment's own
    plan = SimpleNamespace(protocol=replace(PerfProtocol(), time_quality_pair=setting), is_cuda=is_cuda)
    clock = SimpleNamespace(spent=lambda name, t: t)
    assert workers.measure(plan, None, clock) == "perf"  # type: ignore[arg-type]
    return pair, seen["first_pair"], workers.warmup_reused


@pytest.mark.parametrize(("setting", "is_cuda", "timed"), [
    ("auto", True, False), ("auto", False, True), ("yes", True, True), ("no", False, False)])
def test_the_quality_pair_is_timed_only_where_the_setting_says(monkeypatch: pytest.MonkeyPatch, setting: str,
                                                               is_cuda: bool, timed: bool) -> None:
    pair, handed, reused = _measure_with(monkeypatch, setting, is_cuda)
    assert (handed is pair) is timed
    assert pair.closed is not timed  # an untimed quality pair is closed before the first fresh pair starts
    assert reused == (7 if timed else 0)  # no quality generate counts as warm-up for a fresh pair

