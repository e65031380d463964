"""Node ids that can be pasted back as they are printed, also where the suites live in site-packages.

In a wheel-installed project the suites are outside the rootdir and pytest names their tests relative to the
suite folder it was given (`test_quality.py::test_case_against_baseline[digit7-s1071]`), a path that does not
exist where the user stands. Two halves make such an id work: `resolve_suite_args` turns an argument whose file
part names a suite test module that is not there (`test_quality.py::...`, `quality_suite/test_quality.py::...`)
into the installed file's absolute path, and `pasteable` writes the ids the harness prints itself as a path
that exists from the invocation folder (relative under it, absolute otherwise)."""

from __future__ import annotations

import os
from pathlib import Path

from ..loop.guards.suites import SuiteFiles


def suite_module(name: str, suites: SuiteFiles) -> Path | None:
    """The suite test module `name` refers to (`test_quality.py` or `quality_suite/test_quality.py`), or None."""
    wanted = Path(name).parts
    for test in suites.tests:
        for folder in suites.folders:
            if folder not in test.parents:
                continue
            rel = test.relative_to(folder).parts
            if wanted in (rel, (folder.name, *rel)):
                return test
    return None


def resolve_suite_args(args: list[str], invocation_dir: Path, suites: SuiteFiles) -> list[str]:
    """`args` with each suite node id or module that does not exist from `invocation_dir` made absolute."""
    out = []
    for arg in args:
        path, sep, rest = arg.partition("::")
        found = None
        if path.endswith(".py") and not (invocation_dir / path).exists():
            found = suite_module(path, suites)
        out.append(f"{found}{sep}{rest}" if found else arg)
    return out


def pasteable(path: Path, nodeid: str, invocation_dir: Path) -> str:
    """`path::name` for a test of file `path` with pytest node id `nodeid`, runnable from `invocation_dir`."""
    name = nodeid.split("::", 1)[1] if "::" in nodeid else ""
    resolved, base = Path(path).resolve(), Path(invocation_dir).resolve()
    where = os.path.relpath(resolved, base) if base in resolved.parents else str(resolved)
    return f"{where}::{name}" if name else where
