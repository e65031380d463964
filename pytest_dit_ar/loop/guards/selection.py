"""What an experiment's pytest run may select, as pure functions: the whole required test set or a refusal.

An experiment judges a candidate on every test of both suites, so anything that narrows the run (`-k`, `-m`,
`--lf`, a node id, a file outside the suites, a deselection) is refused before anything runs, as are a missing
class or description. The plugin reads pytest's options into a `Request`; `refusal` decides, like `decide`
decides a verdict, and is table-tested (tests/unit/test_selection.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dit_ar_contract.classes import WORDS

from .suites import MARKERS


@dataclass(frozen=True)
class Argument:
    """A command-line argument of the run; `file` is the test module it names (resolved), None for a folder or
    anything that is not a file."""

    text: str
    file: Path | None = None


@dataclass(frozen=True)
class Request:
    """What one experiment run asked for, read from pytest's options and its collection."""

    classification: str | None
    description: str | None
    narrowing: Mapping[str, object] = field(default_factory=dict)  # option as the user types it -> its value
    arguments: tuple[Argument, ...] = ()
    collected: frozenset[Path] = frozenset()  # the resolved files of the collected items
    collection_failed: bool = False


def refusal(request: Request, required: tuple[Path, ...], root: Path) -> str | None:
    """Why the run is not an experiment's whole required test set with its inputs, None when it is."""
    if request.collection_failed:
        return "collection failed (see the errors above); nothing was judged: fix them and run again"
    if request.classification not in WORDS:
        return (f"--dit-ar-classification (or the ini key dit_ar_classification) must be one of "
                f"{', '.join(WORDS)}; got {request.classification!r}")
    if not request.description or not request.description.strip():
        return "--dit-ar-description is required: say in one line what the candidate changes"
    used = [name for name, value in request.narrowing.items() if value]
    if used:
        return f"an experiment runs the whole required test set; remove {', '.join(used)}"
    wanted = set(required)
    for arg in request.arguments:
        if "::" in arg.text or (arg.file is not None and arg.file not in wanted):
            return f"an experiment runs the whole required test set; node id or file {arg.text!r} selects part of it"
    missing = sorted(str(p.relative_to(root)) if root in p.parents else str(p) for p in wanted - request.collected)
    if missing:
        return f"an experiment runs the whole required test set; not selected: {missing}"
    return None


def selects_suites(markexpr: str) -> bool:
    """Whether a `-m` expression asks for the suites: it selects a test marked `quality` or `perf` alone, and
    not an unmarked test (`-m quality`, `-m "perf or quality"`; not `-m "not perf"`)."""
    if not markexpr.strip():
        return False
    from _pytest.mark.expression import Expression

    try:
        expression = Expression.compile(markexpr)
    except Exception:  # a malformed expression is pytest's to report
        return False

    def selects(marks: set[str]) -> bool:
        return bool(expression.evaluate(lambda name, **_: name in marks))

    return not selects(set()) and any(selects({marker}) for marker in MARKERS)
