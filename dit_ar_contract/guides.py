"""How a message sends the user to a task guide: the `dit-ar guide NAME` command that prints it from the installed
package (the repository's `docs/guide/NAME.md`), never a path in a checkout the user may not have."""

from __future__ import annotations


def cite(name: str) -> str:
    """The command that prints guide `name` (tests/unit/test_guides.py checks that every cited guide exists)."""
    return f"`dit-ar guide {name}`"
