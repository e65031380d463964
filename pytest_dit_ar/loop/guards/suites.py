"""Where the two suites' test modules are: the copies of the harness the user installed, wherever that is.

An experiment must run every `test_*.py` of `quality_suite` and `perf_suite`, and always the copies Python
imports (the installed harness), never a copy the project tree happens to hold:

* in this repository with its own editable install, the suites are folders at the root: collecting the root
  finds them and nothing is added;
* in a user's repository they are installed in site-packages with the harness, outside the root (or inside
  it, in a `.venv/` that pytest never recurses into): `dit-ar experiment` then names their folders
  explicitly, and the plugin adds them to `pytest -m quality` / `-m perf` runs;
* in a second git worktree or clone of this repository whose venv was installed from another checkout, the
  tree's own `quality_suite/` and `perf_suite/` are *shadowed* copies: importing them would clash with the
  installed packages of the same name ("import file mismatch"), so they are never collected, and a path
  into them on the command line is redirected to the installed copy.

The files are found through the import system (the packages Python would import), never by a path the
project could redirect.
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
        """The suite folders that collecting `root` does not find: what pytest must be given explicitly (a
        folder, not its files, so that test ids read `test_quality.py::...`). Only a suite at `root/<name>`
        is found by collecting the root; one anywhere else (site-packages, a `.venv/` inside the root,
        another checkout) is not."""
        base = Path(root).resolve()
        return tuple(f for f in self.folders if f.parent != base)

    def shadowed(self, root: Path) -> tuple[Path, ...]:
        """The tree's own suite folders (`root/quality_suite`, `root/perf_suite`) that are not the installed
        ones: a second worktree or clone whose harness is installed from elsewhere."""
        base = Path(root).resolve()
        return tuple(base / f.name for f in self.folders if (base / f.name).is_dir() and base / f.name != f)

    def in_shadowed(self, path: Path, root: Path) -> bool:
        """Whether `path` is a shadowed suite folder or lies inside one."""
        resolved = Path(path).resolve()
        return any(resolved == s or s in resolved.parents for s in self.shadowed(root))

    def redirect(self, arg: str, root: Path, cwd: Path) -> str:
        """A command-line path (or node id, relative to `cwd`) into a shadowed copy, pointed at the installed
        copy instead; any other argument unchanged."""
        path, sep, rest = arg.partition("::")
        if not path or path.startswith("-"):
            return arg
        candidate = Path(path) if Path(path).is_absolute() else Path(cwd) / path
        base = Path(root).resolve()
        for installed in self.folders:
            shadow = base / installed.name
            if shadow == installed or not shadow.is_dir():
                continue
            resolved = candidate.resolve()
            if resolved == shadow or shadow in resolved.parents:
                return str(installed / resolved.relative_to(shadow)) + sep + rest
        return arg

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
