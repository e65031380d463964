"""loop/guards/selection.py: an experiment runs the whole required test set with a class and a description, or is
refused with the line that says what to change (a table, like the verdict's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_dit_ar.loop.guards.selection import Argument, Request, refusal

ROOT = Path("/project")
REQUIRED = (ROOT / "quality_suite" / "test_quality.py", ROOT / "perf_suite" / "test_perf.py")
WHOLE = dict(classification="exact", description="batch CFG", collected=frozenset(REQUIRED))

TABLE = [
    ("whole set", Request(**WHOLE), None),
    ("suite folders named", Request(**WHOLE, arguments=(Argument(str(ROOT / "quality_suite")),)), None),
    ("a suite file named", Request(**WHOLE, arguments=(Argument("quality_suite/test_quality.py", REQUIRED[0]),)),
     None),
    ("collection failed", Request(**WHOLE, collection_failed=True), "collection failed"),
    ("no class", Request(**{**WHOLE, "classification": None}), "must be one of exact, numerical, approximate"),
    ("unknown class", Request(**{**WHOLE, "classification": "fast"}), "got 'fast'"),
    ("no description", Request(**{**WHOLE, "description": "  "}), "--dit-ar-description is required"),
    ("-k and --lf", Request(**WHOLE, narrowing={"-k": "aggregate", "--lf": True, "-m": None}), "remove -k, --lf"),
    ("node id", Request(**WHOLE, arguments=(Argument("quality_suite/test_quality.py::test_corpus_aggregate"),)),
     "node id or file 'quality_suite/test_quality.py::test_corpus_aggregate' selects part of it"),
    ("another file", Request(**WHOLE, arguments=(Argument("tests/test_x.py", ROOT / "tests" / "test_x.py"),)),
     "node id or file 'tests/test_x.py'"),
    ("a suite left out", Request(**{**WHOLE, "collected": frozenset(REQUIRED[:1])}),
     "not selected: ['perf_suite/test_perf.py']"),
]


@pytest.mark.parametrize("request_,expected", [(r, e) for _, r, e in TABLE], ids=[name for name, _, _ in TABLE])
def test_refusal(request_: Request, expected: str | None) -> None:
    problem = refusal(request_, REQUIRED, ROOT)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem, problem
