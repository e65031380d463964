"""One experiment per GPU on the machine, across worktrees and repositories."""

from __future__ import annotations

from pathlib import Path

import pytest

from dit_ar_contract.errors import Refused
from pytest_dit_ar.loop.guards import gpu_locks


def test_a_busy_gpu_is_refused_by_name_and_a_free_one_is_not(tmp_path: Path) -> None:
    first = gpu_locks.acquire(["GPU-aaaa"], tmp_path)
    with pytest.raises(Refused, match="another experiment is using GPU GPU-aaaa"):
        gpu_locks.acquire(["GPU-aaaa"], tmp_path)
    other = gpu_locks.acquire(["GPU-bbbb"], tmp_path)  # the session on the other GPU runs
    gpu_locks.release(first)
    again = gpu_locks.acquire(["GPU-aaaa"], tmp_path)
    gpu_locks.release(again)
    gpu_locks.release(other)


def test_a_two_gpu_lane_holds_both_or_neither(tmp_path: Path) -> None:
    busy = gpu_locks.acquire(["GPU-bbbb"], tmp_path)
    with pytest.raises(Refused, match="GPU-bbbb"):
        gpu_locks.acquire(["GPU-aaaa", "GPU-bbbb"], tmp_path)
    alone = gpu_locks.acquire(["GPU-aaaa"], tmp_path)  # the refused lane let go of the GPU it had taken
    gpu_locks.release(alone)
    gpu_locks.release(busy)
