"""`dit-ar guide [NAME]`: the task guides (the repository's `docs/guide/`), from wherever the harness is installed.

A wheel carries a copy of `docs/guide/` as package data (`pytest_dit_ar/guides/`, put there by setup.py's build
step, like the handbook); an editable install reads the repository's folder. Without NAME the list, one line a
guide (from the guides' own table of contents); with NAME the guide's text, its links to other guides written as
the `dit-ar guide NAME` that prints them. Every message of the harness that sends the user to a guide names it
this way (`dit_ar_contract.guides.cite`).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from dit_ar_contract.errors import Refused

PACKAGED = Path(__file__).resolve().parents[1] / "guides"  # inside an installed pytest_dit_ar
SOURCE_TREE = Path(__file__).resolve().parents[2] / "docs" / "guide"  # an editable install's repository
INDEX = "README.md"
ROW = re.compile(r"^\|\s*\[[^\]]+\]\(([a-z0-9-]+)\.md\)\s*\|\s*(.+?)\s*\|\s*$")
LINK = re.compile(r"\]\(([a-z0-9-]+)\.md(#[a-z0-9-]+)?\)")


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "guide", help="print a task guide (no NAME: the list of guides)",
        description="Print one of the task guides shipped with the harness; without NAME, list them.")
    parser.add_argument("name", nargs="?", help="the guide's name, e.g. your-own-model (no NAME: the list)")
    parser.set_defaults(func=run)
    return parser


def folder() -> Path:
    """Where the guides are: the installed copy, else the repository's `docs/guide/`."""
    for candidate in (PACKAGED, SOURCE_TREE):
        if (candidate / INDEX).is_file():
            return candidate
    raise Refused(f"no guides found (looked in {PACKAGED} and {SOURCE_TREE}); reinstall pytest-dit-ar from its "
                  "wheel or checkout (`pip install PATH`)")


def listing(where: Path) -> list[tuple[str, str]]:
    """(name, when you need it) for each guide: the index's table first, then any guide it does not list."""
    rows = [(m.group(1), m.group(2)) for line in (where / INDEX).read_text(encoding="utf-8").splitlines()
            if (m := ROW.match(line)) and (where / f"{m.group(1)}.md").is_file()]
    listed = {name for name, _ in rows}
    for path in sorted(where.glob("*.md")):
        if path.name != INDEX and path.stem not in listed:
            rows.append((path.stem, path.read_text(encoding="utf-8").splitlines()[0].lstrip("# ")))
    return rows


def text(name: str, where: Path) -> str:
    """The guide's markdown, its links to other guides shown as the command that prints them."""
    path = where / f"{name.removesuffix('.md')}.md"
    if not path.is_file() or path.name == INDEX:
        known = ", ".join(n for n, _ in listing(where))
        raise Refused(f"no guide {name!r}; the guides are: {known}", way_out="`dit-ar guide` lists them")
    return LINK.sub(lambda m: f"](`dit-ar guide {m.group(1)}`)", path.read_text(encoding="utf-8"))


def run(args: argparse.Namespace) -> int:
    where = folder()
    if args.name:
        print(text(args.name, where), end="")
        return 0
    rows = listing(where)
    width = max(len(name) for name, _ in rows)
    print("guides (`dit-ar guide NAME` prints one):")
    for name, what in rows:
        print(f"  {name:<{width}}  {what}")
    return 0
