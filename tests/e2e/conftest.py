"""Fixtures for the project's own tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.loop import clone_state, make_project_copy, run


@pytest.fixture(scope="session")
def loop_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project copy with an initialised session and a baseline of the embedded-cpu lane."""
    repo = make_project_copy(tmp_path_factory.mktemp("template") / "repo")
    run(repo, "init", "--tag", "t1", "--lane", "embedded-cpu", check=True)
    run(repo, "baseline", "--quiet", check=True)
    return repo


@pytest.fixture
def loop_repo(loop_template: Path, tmp_path: Path) -> Path:
    """A private copy of the prepared template for one test."""
    return clone_state(loop_template, tmp_path / "repo")
