"""The sandbox for the tests that start a sandboxed worker: skipped where bubblewrap cannot make one, but a failure
under CI (`CI=1`, as `.ci/run` sets it), which installs bubblewrap: a sandbox test never skips there."""

from __future__ import annotations

import os

import pytest

from pytest_dit_ar.worker import sandbox


def require_sandbox() -> None:
    why = sandbox.available()
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI=1 and bubblewrap cannot make a sandbox here ({why}); .ci/run installs bubblewrap")
    pytest.skip(f"no sandbox here: {why}")
