"""Every `dit-ar ...` command written in program.md, README.md, SKILL.md and the handbook must be accepted by the
real CLI parser (the guides and design pages are checked by test_docs_truth, which allows a verb named with only
some of its flags).

Commands are taken from fenced code blocks (one per line, `\\` continuations joined, a leading `$ `
prompt dropped) and from inline code spans that start with `dit-ar `. Shell operators (`|`, `&&`, `;`,
redirections) and comments end a command. A usage line with optional parts in brackets is not a command. Each
command is parsed with
`pytest_dit_ar.cli.build_parser().parse_args(shlex.split(cmd)[1:])`.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DOCS = [ROOT / "program.md", ROOT / "README.md", ROOT / "SKILL.md", *sorted((ROOT / "handbook").rglob("*.md"))]
OWN_MODEL_GUIDE = ROOT / "docs" / "guide" / "your-own-model.md"
OWN_MODEL_SECTION = "## From a diffusers pipeline"
VERBS = ("doctor", "init", "baseline", "experiment", "search", "status", "profile", "report")

_INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_OPERATOR = re.compile(r"^[;&|<>()]+$")


def _split(cmd: str) -> list[str]:
    lexer = shlex.shlex(cmd, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    out = []
    for token in lexer:
        if _OPERATOR.match(token):
            break
        out.append(token)
    return out


def extract_commands(text: str) -> list[tuple[int, str]]:
    """(line number, command) for every dit-ar command in a markdown text."""
    found: list[tuple[int, str]] = []
    in_fence = False
    pending, pending_line = "", 0
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            in_fence = not in_fence
            pending = ""
            continue
        if in_fence:
            if pending:
                pending += " " + stripped
            else:
                body = stripped[2:] if stripped.startswith("$ ") else stripped
                if not body.startswith("dit-ar "):
                    continue
                pending, pending_line = body, number
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip()
                continue
            found.append((pending_line, pending))
            pending = ""
            continue
        for match in _INLINE.finditer(line):
            span = match.group(1).strip()
            if span.startswith("dit-ar "):
                found.append((number, span))
    return found


def _all_commands() -> list[tuple[str, int, str]]:
    out = []
    for path in DOCS:
        for line, cmd in extract_commands(path.read_text(encoding="utf-8")):
            if "[" not in cmd:  # a usage line (`dit-ar status [--json]`), not a command
                out.append((path.relative_to(ROOT).as_posix(), line, cmd))
    return out


COMMANDS = _all_commands()


@functools.cache
def _build_parser():
    """The CLI's parser, built once for all the commands (parsing keeps no state in it; a build costs ~13 ms)."""
    from pytest_dit_ar.cli.main import build_parser

    return build_parser()


def test_extractor_finds_commands_in_blocks_and_inline():
    sample = (
        "Run `dit-ar status --json` now; `dit-ar` alone is just the name.\n"
        "```bash\n"
        "$ dit-ar search \"cuda graphs\" --top 3   # a comment\n"
        "dit-ar experiment --classification exact \\\n"
        "    --description \"two lines\"\n"
        "nsys profile python x.py\n"
        "dit-ar report | tee out.txt\n"
        "```\n"
    )
    cmds = [c for _, c in extract_commands(sample)]
    assert cmds[0] == "dit-ar status --json"
    assert _split(cmds[1]) == ["dit-ar", "search", "cuda graphs", "--top", "3"]
    assert _split(cmds[2]) == ["dit-ar", "experiment", "--classification", "exact", "--description", "two lines"]
    assert _split(cmds[3]) == ["dit-ar", "report"]
    assert len(cmds) == 4


def test_docs_cover_every_verb():
    assert len(COMMANDS) >= 30, f"only {len(COMMANDS)} dit-ar commands found in the docs"
    verbs = {_split(cmd)[1] for _, _, cmd in COMMANDS if len(_split(cmd)) > 1}
    verbs |= {_split(cmd)[3] for _, _, cmd in COMMANDS if _split(cmd)[1:2] == ["--config"] and len(_split(cmd)) > 3}
    missing = set(VERBS) - verbs
    assert not missing, f"verbs never shown in program.md or the handbook: {sorted(missing)}"


@pytest.mark.parametrize("where,line,cmd", COMMANDS, ids=[f"{w}:{n}" for w, n, _ in COMMANDS])
def test_documented_command_parses(where, line, cmd):
    parser = _build_parser()
    argv = _split(cmd)[1:]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{where}:{line}: `{cmd}` is rejected by the CLI (exit {exc.code}): {err.getvalue().strip()}")


def _own_model_section() -> str:
    text = OWN_MODEL_GUIDE.read_text(encoding="utf-8")
    return text.split(OWN_MODEL_SECTION, 1)[1].split("\n## ", 1)[0]


OWN_MODEL = [cmd for _, cmd in extract_commands(_own_model_section())]


def test_own_model_guide_shows_the_loop_from_scaffold_to_experiment():
    """The commands tests/e2e/test_scaffold.py runs in a user's repository are the ones the guide shows."""
    verbs = [_split(cmd)[1] for cmd in OWN_MODEL]
    assert verbs == ["scaffold", "doctor", "init", "baseline", "experiment"], verbs


@pytest.mark.parametrize("cmd", OWN_MODEL)
def test_own_model_guide_command_parses(cmd):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            _build_parser().parse_args(_split(cmd)[1:])
    except SystemExit as exc:
        pytest.fail(f"{OWN_MODEL_GUIDE.name}: `{cmd}` is rejected by the CLI (exit {exc.code}): "
                    f"{err.getvalue().strip()}")
