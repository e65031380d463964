"""The unit tier: no worker, no CLI, no pytest-in-pytest. Only `git` itself may run as a subprocess
(GitPython drives it for the git-guard tests); anything else started from here fails the test.

CI runs the tier in pytest-xdist processes, one per core (`-n 2`). Each of them computes with one thread (torch,
its BLAS and numpy's read OMP_NUM_THREADS when torch is first imported, after this file): two processes of two
threads each on two cores wait on each other's threads instead of computing. A run without xdist keeps the
libraries' default."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ALLOWED = {"git"}

if os.environ.get("PYTEST_XDIST_WORKER"):  # set by xdist before a worker reads any conftest
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _no_subprocesses(monkeypatch: pytest.MonkeyPatch) -> None:
    real = subprocess.Popen.__init__

    def guarded(self, args, *a, **kw):  # noqa: ANN001 - mirrors Popen's signature
        program = Path(str(args[0] if isinstance(args, (list, tuple)) else str(args).split()[0])).name
        if program not in ALLOWED:
            raise AssertionError(f"the unit tier starts no subprocess ({program!r}); move this test to tests/e2e")
        real(self, args, *a, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)
