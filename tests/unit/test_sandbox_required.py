"""The sandbox tests' guard (tests/helpers/sandbox_required.py): under CI=1 a missing sandbox fails, elsewhere it
skips, and where bubblewrap works it does neither."""

from __future__ import annotations

import pytest

from pytest_dit_ar.worker import sandbox
from tests.helpers.sandbox_required import require_sandbox


def test_a_missing_sandbox_fails_under_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "available", lambda: "bubblewrap (bwrap) is not installed")
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match=r"CI=1 .*bwrap\) is not installed.*\.ci/run installs"):
        require_sandbox()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="no sandbox here"):
        require_sandbox()
    monkeypatch.setattr(sandbox, "available", lambda: None)
    monkeypatch.setenv("CI", "1")
    require_sandbox()
