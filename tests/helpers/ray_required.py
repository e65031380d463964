"""Ray for the fleet's tests: skipped where the `ray` extra is not installed, but a failure under CI (`CI=1`, as
`.ci/run` sets it), where the README's install line installs it: the fleet's tests run in CI, never skip there."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def require_ray() -> ModuleType:
    if os.environ.get("CI"):
        try:
            return importlib.import_module("ray")
        except ModuleNotFoundError as exc:
            raise RuntimeError("CI=1 and Ray is not installed: install as the README says, "
                               "`pip install -e '.[test,ray]'` (.ci/run does)") from exc
    return pytest.importorskip("ray")
