"""The unit tier: no worker, no CLI, no pytest-in-pytest. Only `git` itself may run as a subprocess
(GitPython drives it for the git-guard tests), and `ldconfig -p`, which the standard library's
`ctypes.util.find_library` runs when torch is first imported (its CUDA library finder): a test that imports torch
first works as one that finds it imported. Anything else started from here fails the test.

CI runs the tier in pytest-xdist processes, one per core (`-n 2`), each computing with one thread (the root
`conftest.py` says why and sets it, before numpy is first imported).

The garbage collector: by the end of collection a worker holds millions of objects (torch, diffusers, the
transformers library, scipy), and each full collection walks all of them again (about half a second each, a dozen
or more per worker during a run). Collection runs with the collector off, and what it imported is frozen
(`gc.freeze`) before the first test: the collector keeps running, over what the tests themselves create, ten
times less often (the tests import more, and every tenth of its middle collections walks all of that again). The
heap is frozen again at the end, which spares the interpreter's exit its own walk over it (about 3 CPU seconds a
worker with torch, diffusers and the transformers library imported)."""

from __future__ import annotations

import gc
import subprocess
from pathlib import Path

import pytest

ALLOWED = {"git"}
LIBRARY_LOOKUP = ["/sbin/ldconfig", "-p"]  # ctypes.util.find_library's own call, nothing of the project's
YOUNG = gc.get_threshold()[0]  # allocations between two young collections (700 by default)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session):  # noqa: ANN201 - the wrapped hook's result
    gc.disable()
    try:
        return (yield)
    finally:
        gc.freeze()
        gc.set_threshold(10 * YOUNG, 10, 10)
        gc.enable()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    gc.freeze()  # the interpreter's exit then skips a last collection over everything the tests imported


@pytest.fixture(autouse=True)
def _no_subprocesses(monkeypatch: pytest.MonkeyPatch) -> None:
    real = subprocess.Popen.__init__

    def guarded(self, args, *a, **kw):  # noqa: ANN001 - mirrors Popen's signature
        program = Path(str(args[0] if isinstance(args, (list, tuple)) else str(args).split()[0])).name
        if program not in ALLOWED and list(args) != LIBRARY_LOOKUP:
            raise AssertionError(f"the unit tier starts no subprocess ({program!r}); move this test to tests/e2e")
        real(self, args, *a, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)


@pytest.fixture(scope="session")
def handbook_index():  # noqa: ANN201 - pytest_dit_ar.search.index.Index, imported when a test asks for it
    """The project's handbook indexed once per process for the tests that only search it: read it, never change it."""
    from pytest_dit_ar.search.engine import build_index

    return build_index(Path(__file__).resolve().parents[2] / "handbook")
