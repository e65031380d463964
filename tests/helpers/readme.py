"""The commands README.md shows in its code blocks, with the section each sits in, and how to run one as written.

Read by tests/unit/test_readme_commands.py (every command has a test that runs it) and tests/e2e/test_readme.py
(the tests that run them)."""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
README = PROJECT / "README.md"
SHELL_FENCES = ("```bash", "```sh", "```shell", "```console")


@dataclass(frozen=True)
class Command:
    section: str  # the "## " heading above it
    line: int
    text: str  # as shown: `\` continuations joined, a trailing comment dropped, spaces collapsed


def drop_comment(line: str) -> str:
    """The line without a shell comment (a `#` that starts a word outside quotes)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def commands(text: str | None = None) -> list[Command]:
    """Every command line of the README's shell code blocks, in order."""
    text = README.read_text(encoding="utf-8") if text is None else text
    found: list[Command] = []
    section, block, pending, start = "", "", "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("```"):
            block = ("shell" if stripped.startswith(SHELL_FENCES) else "other") if not block else ""
            continue
        if not block and raw.startswith("## "):
            section = stripped
        if block != "shell":
            continue
        body = drop_comment(stripped)
        if not body and not pending:
            continue
        if not pending:
            start = number
        if body.endswith("\\"):
            pending += body[:-1].strip() + " "
            continue
        found.append(Command(section, start, re.sub(r"\s+", " ", (pending + body).strip())))
        pending = ""
    return found


def in_section(heading: str) -> list[Command]:
    return [c for c in commands() if c.section.startswith(heading)]


def argv(command: str) -> list[str]:
    """The program and arguments of one simple command, as a test runs it in this interpreter: `dit-ar` is the
    CLI module, `pytest` is pytest's."""
    words = shlex.split(command)
    if words[0] == "dit-ar":
        return [sys.executable, "-m", "pytest_dit_ar.cli", *words[1:]]
    if words[0] == "pytest":
        return [sys.executable, "-m", "pytest", *words[1:]]
    return words
