"""The plugin's collection phase: which paths pytest collects, in what order, and what the run asked for.

The arguments are rewritten once (a pasted node id of an installed suite, the suites installed outside the
rootdir); `ignores` and `order` answer pytest's collection hooks; `request` turns pytest's options and the
collected items into the `loop.guards.selection.Request` that the pure selection rule judges.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..loop.guards import selection
from ..loop.guards.selection import selects_suites
from ..loop.guards.suites import SUITES, SuiteFiles

BENCHMARK_SKIP = ("inside an experiment the verdict's timed rounds are the measurement (perf.json); publish with "
                  "`pytest -m perf --benchmark-autosave`")


class Collection:
    """What pytest collects in this run: the suites, and in experiment mode only the suites."""

    def __init__(self, config: pytest.Config, suites: SuiteFiles, experiment_mode: bool):
        self.config, self.suites, self.experiment_mode = config, suites, experiment_mode
        self.deselected: list[pytest.Item] = []
        self._inner_suites: tuple[Path, ...] = ()  # installed suites named as arguments that lie inside the root
        self._resolve_node_ids()
        self._add_installed_suites()

    def _resolve_node_ids(self) -> None:
        """A pasted suite node id that is not a path here (`test_quality.py::...` printed in a wheel-installed
        project) names the installed suite module."""
        from .node_ids import resolve_suite_args

        self.config.args[:] = resolve_suite_args(list(self.config.args), Path(self.config.invocation_params.dir),
                                                 self.suites)

    def _add_installed_suites(self) -> None:
        """Suites installed outside the rootdir (a user's repository) are never found by collecting it: an
        experiment, and a plain run whose `-m` asks for the suites without naming paths, gets their
        folders as arguments. In this repository the suites are under the root and nothing is added."""
        root = Path(self.config.rootpath)
        cwd = Path(self.config.invocation_params.dir)
        self.config.args[:] = [self.suites.redirect(arg, root, cwd) for arg in self.config.args]
        opt = self.config.option
        wanted = self.experiment_mode or (selects_suites(opt.markexpr or "") and
                                          self.config.args_source != pytest.Config.ArgsSource.ARGS)
        if wanted:
            known = {Path(arg).resolve() for arg in self.config.args if "::" not in arg}
            self.config.args.extend(str(p) for p in self.suites.outside(root) if p not in known)
        named = {Path(arg).resolve() for arg in self.config.args if "::" not in arg}
        base = root.resolve()
        self._inner_suites = tuple(p for p in self.suites.outside(root) if base in p.parents and p in named)

    def _way_to_inner_suites(self, collection_path: Path) -> bool | None:
        """Suites installed inside the root below a folder pytest never enters (the README's `.venv/`):
        pytest 8+ collects overlapping arguments as one tree, so the root's own walk decides, and it skips the
        venv, suites and all (`pytest -m quality` collected nothing). The folders on the way down to a suite
        are entered (False) and everything else in the skipped folder stays out (True); None elsewhere."""
        if not self._inner_suites:
            return None
        resolved = collection_path.resolve()
        # a link on the way (a venv's lib64 -> lib) would collect the suites twice: only the real folders
        if not collection_path.is_symlink() and any(resolved in folder.parents for folder in self._inner_suites):
            return False
        base = Path(self.config.rootpath).resolve()
        tops = {base / folder.relative_to(base).parts[0] for folder in self._inner_suites}
        if any(resolved == top or top in resolved.parents for top in tops) and not self.suites.contains(resolved):
            return True
        return None

    def ignores(self, collection_path: Path) -> bool | None:
        """In experiment mode only the two suites are collected (the project's own tests are not); in any
        mode the tree's own copies of the suites are not when the harness is installed from elsewhere (a
        second worktree or clone: the installed copies run instead); suites installed in a venv inside the
        root are reached through it (`_way_to_inner_suites`)."""
        root = Path(self.config.rootpath)
        if self.suites.in_shadowed(collection_path, root):
            return True
        way = self._way_to_inner_suites(collection_path)
        if way is not None:
            return way
        if not self.experiment_mode:
            return None
        if self.suites.contains(collection_path):
            return None
        try:
            rel = collection_path.resolve().relative_to(root.resolve())
        except ValueError:
            return True
        if not rel.parts:
            return None
        return None if rel.parts[0] in SUITES else True

    def order(self, items: list[pytest.Item]) -> None:
        """Quality before performance (speed is only worth measuring for a candidate that passed);
        pytest-benchmark tests last, after the A/B verdict test. Inside an experiment the benchmark tests
        are skipped before their workers start: they decide nothing, and the verdict's own timed rounds
        are the experiment's measurement (perf.json)."""
        items.sort(key=lambda it: 0 if it.get_closest_marker("quality") else
                   2 if "benchmark" in getattr(it, "fixturenames", ()) else 1)
        if self.experiment_mode:
            skip = pytest.mark.skip(reason=BENCHMARK_SKIP)
            for item in items:
                if "benchmark" in getattr(item, "fixturenames", ()):
                    item.add_marker(skip)

    def request(self, session: pytest.Session, classification: str | None,
                description: str | None) -> selection.Request:
        """What this run asked for, in pytest's options and its collection."""
        opt = self.config.option
        narrowing = {"-k": opt.keyword, "-m": opt.markexpr, "--lf": getattr(opt, "lf", False),
                     "--sw": getattr(opt, "stepwise", False), "-x/--maxfail": opt.maxfail,
                     "-n (xdist)": getattr(opt, "numprocesses", None), "--deselect": self.deselected,
                     "--benchmark-skip": getattr(opt, "benchmark_skip", False),
                     "--benchmark-only": getattr(opt, "benchmark_only", False)}
        arguments = tuple(selection.Argument(arg, Path(arg).resolve() if Path(arg).is_file() else None)
                          for arg in self.config.args)
        return selection.Request(classification, description, narrowing, arguments,
                                 frozenset(Path(str(item.path)).resolve() for item in session.items),
                                 bool(session.testsfailed))

    def refusal(self, session: pytest.Session, classification: str | None, description: str | None) -> str | None:
        """Why an experiment over this collection would be refused (not exactly the whole required test set, or
        its inputs lacking), None when it may start."""
        return selection.refusal(self.request(session, classification, description), self.suites.tests,
                                 Path(self.config.rootpath).resolve())


def cases_needed(items: list[pytest.Item]) -> set[str] | None:
    """The corpus cases a plain run's selected tests need (None: the whole corpus, or no per-case test)."""
    cased = [item for item in items if "dit_ar_case" in getattr(item, "fixturenames", ())]
    whole = [item for item in items if {"dit_ar_quality", "dit_ar_corpus"} &
             set(getattr(item, "fixturenames", ())) and "dit_ar_case" not in item.fixturenames]
    if cased and not whole:
        return {item.callspec.params["dit_ar_case"].id for item in cased}
    return None
