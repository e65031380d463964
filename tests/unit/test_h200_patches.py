"""The published H200 candidate series still applies to model_under_test/, in any subset."""

from __future__ import annotations

import py_compile
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATCHES = sorted((ROOT / "examples/h200-session/patches").glob("*.patch"))
CLASSES = {"exact", "numerical", "approximate", "quantization"}


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture()
def scratch(tmp_path: Path) -> Path:
    """A throwaway repository holding a copy of model_under_test/ as committed here."""
    shutil.copytree(ROOT / "model_under_test", tmp_path / "model_under_test",
                    ignore=shutil.ignore_patterns("__pycache__", "weights"))
    for args in (("init", "-q"), ("add", "-A"), ("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")):
        assert _git(tmp_path, *args).returncode == 0
    return tmp_path


def _apply(repo: Path, patches: list[Path]) -> None:
    _git(repo, "reset", "-q", "--hard")
    _git(repo, "clean", "-qfd")
    for patch in patches:
        done = _git(repo, "apply", str(patch))
        assert done.returncode == 0, f"{patch.name} after {[p.name for p in patches]}: {done.stderr}"


def test_series_is_named_and_described() -> None:
    assert len(PATCHES) >= 10
    for patch in PATCHES:
        assert patch.name.split("-")[1] in CLASSES, f"{patch.name}: the second field must be a class"
        assert patch.read_text().startswith("Subject: "), f"{patch.name} has no Subject: line"


def test_whole_series_applies_and_compiles(scratch: Path) -> None:
    _apply(scratch, PATCHES)
    for source in (scratch / "model_under_test").glob("*.py"):
        py_compile.compile(str(source), doraise=True)


@pytest.mark.parametrize("left_out", range(len(PATCHES)), ids=[p.stem.split("-")[0] for p in PATCHES])
def test_series_applies_without_any_one_patch(scratch: Path, left_out: int) -> None:
    """A discarded candidate is reset, so every later patch must apply without it."""
    _apply(scratch, [p for i, p in enumerate(PATCHES) if i != left_out])
