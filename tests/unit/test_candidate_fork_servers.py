"""When an experiment starts its timing's fork servers: beside the quality run on GPU lanes, at the first fork on
CPU lanes (an experiment decided by the quality run or its first pair then starts none)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from dit_ar_contract.perf_protocol import PerfProtocol
from pytest_dit_ar.loop import candidate


class _Recorder:
    made: list[_Recorder] = []

    def __init__(self, launcher, cand_root, best_root, log_dir, per_side=1, tag=""):
        self.per_side, self.lazy = per_side, None
        _Recorder.made.append(self)

    def spawn(self, lazy: bool = False) -> _Recorder:
        self.lazy = lazy
        return self


@pytest.mark.parametrize("is_cuda", [False, True])
def test_cpu_lanes_start_the_timings_fork_servers_lazily(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          is_cuda: bool) -> None:
    monkeypatch.setattr(candidate, "ForkServers", _Recorder)
    _Recorder.made.clear()
    workers = candidate.CandidateWorkers.__new__(candidate.CandidateWorkers)
    workers.session = SimpleNamespace(lane=SimpleNamespace(is_cuda=is_cuda, performance=PerfProtocol()))
    workers.launcher, workers.run = None, SimpleNamespace(dir=tmp_path)
    workers.candidate_root, workers.best_root, workers.prefetch_best = tmp_path / "c", tmp_path / "b", True
    workers.warm = SimpleNamespace(timing=lambda: None)  # no adopted timing servers
    workers._spawn_forks()
    (made,) = _Recorder.made
    assert made.lazy is (not is_cuda) and workers.forks is made
    assert made.per_side == PerfProtocol().fork_servers(is_cuda)
