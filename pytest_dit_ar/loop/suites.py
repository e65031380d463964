"""Where the two suites' test modules are: under the project's root (this repository) or installed.

An experiment must run every `test_*.py` of `quality_suite` and `perf_suite`. In this repository the suites
are folders at the root, so collecting the root finds them. In a user's repository they are installed in
site-packages with the harness, outside the root: `dit-ar experiment` then names their folders explicitly, and
the plugin adds them to `pytest -m quality` / `-m perf` runs. The files are found through the import system
(the packages Python would import), never by a path the project could redirect.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

SUITES = ("quality_suite", "perf_suite")
MARKERS = ("quality", "perf")  # the suites' markers: `pytest -m quality`, `-m perf`


@dataclass(frozen=True)
class SuiteFiles:
    """The suites' folders and their required test modules (resolved paths)."""

    folders: tuple[Path, ...]
    tests: tuple[Path, ...]

    def outside(self, root: Path) -> tuple[Path, ...]:
        """The suite folders not under `root`: what pytest must be given explicitly (a folder, not its files,
        so that test ids read `test_quality.py::...`)."""
        base = Path(root).resolve()
        return tuple(f for f in self.folders if base not in f.parents)

    def contains(self, path: Path) -> bool:
        """Whether `path` is one of the suites' folders or lies inside one."""
        resolved = Path(path).resolve()
        return any(resolved == f or f in resolved.parents for f in self.folders)


def suite_folder(name: str) -> Path:
    """The folder of the importable package `name` (found without importing it)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the harness package {name!r} is not importable: reinstall pytest-dit-ar")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def suite_files() -> SuiteFiles:
    """Both suites' folders and every test_*.py inside them, sorted."""
    folders = tuple(suite_folder(name) for name in SUITES)
    tests = tuple(sorted(p.resolve() for folder in folders for p in folder.rglob("test_*.py")
                         if "__pycache__" not in p.parts))
    return SuiteFiles(folders, tests)

