"""Every command README.md shows in a code block is run by some test, and the map below says which.

A command maps either to a test of tests/e2e/test_readme.py, which reads the README section it sits in and runs
each command there as written, or to `.ci/run`, which installs the project and runs its checks exactly as the
README's install and test blocks say. A README command without an entry here fails
`test_every_readme_command_has_a_runner`; an entry whose test no longer runs that section, or a CI command that
`.ci/run` does not run, fails the tests after it.
"""

from __future__ import annotations

import ast
import shlex
from pathlib import Path

import pytest

from tests.helpers.readme import commands, drop_comment

ROOT = Path(__file__).resolve().parents[2]
CI = ".ci/run"
E2E = "tests/e2e/test_readme.py"
DEMO = f"{E2E}::test_the_demo_gives_the_documented_verdicts"
QUICKSTART = f"{E2E}::test_the_quickstart_runs_as_written"
PYTEST = f"{E2E}::test_the_pytest_commands_run_as_written"

RUNNERS = {
    "sudo apt-get install -y bubblewrap chromium": CI,
    "python3 -m venv .venv && . .venv/bin/activate": CI,
    "pip install torch==2.14.1 torchvision==0.29.1": CI,
    "pip install -e '.[test,ray]'": CI,
    "dit-ar --config config/autoresearch.json demo": DEMO,
    "dit-ar --config config/autoresearch.json doctor": QUICKSTART,
    "dit-ar --config config/autoresearch.json init --tag first --lane embedded-cpu": QUICKSTART,
    "dit-ar --config config/autoresearch.json baseline": QUICKSTART,
    'git commit -am "batch the two classifier-free guidance passes into one forward"': QUICKSTART,
    'dit-ar --config config/autoresearch.json experiment --classification exact --description "batch the two '
    'classifier-free guidance passes into one forward"': QUICKSTART,
    "dit-ar --config config/autoresearch.json status": QUICKSTART,
    'pytest --dit-ar-experiment --dit-ar-classification exact --dit-ar-description "..."': PYTEST,
    "pytest -m quality": PYTEST,
    "pytest -m perf": PYTEST,
    'pytest "quality_suite/test_quality.py::test_case_against_baseline[digit0-s1000]"': PYTEST,
    "pytest -p no:dit-ar": PYTEST,
    "ruff check .": CI,
    "lint-imports": CI,
    "pytest tests/unit lab/tests -n 2": CI,
    'pytest tests/e2e -m "not extended"': CI,
}

# Test folders a README command names that another branch of this change set adds (the lab's tests). Until the
# folder exists here, .ci/run cannot run it; once it exists, .ci/run must.
ADDED_BY_THE_LAB_BRANCH = {"lab/tests"}

CONTROL = ("if ", "fi", "then", "else", "set ", "cd ", "export ", "for ", "done")
VALUE_OPTIONS = {"-m", "-k", "-p", "-c", "-n"}


def ci_commands(text: str) -> list[list[str]]:
    """The simple commands a shell script runs, normalised (see `normalise`), control lines left out."""
    out = []
    for raw in text.splitlines():
        line = drop_comment(raw.strip())
        if not line or line.startswith(CONTROL) or line.startswith("#!") or "=" in line.split()[0]:
            continue
        for part in line.replace("||", "&&").replace(";", "&&").split("&&"):
            if part.strip():
                out.append(normalise(part))
    return out


def normalise(command: str) -> list[str]:
    """Words of a command as it matters for what runs: no `sudo`, no quiet flags, no output redirections."""
    words, out, skip = shlex.split(command), [], False
    for word in words:
        if skip:
            skip = False
            continue
        if word in (">", "2>", "&>", ">>"):
            skip = True
            continue
        if word.startswith((">", "2>", "&>")) or word in ("-qq", "--quiet"):
            continue
        out.append(word)
    return out[1:] if out[:1] == ["sudo"] else out


def pytest_parts(words: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(options with their values, paths) of a pytest command."""
    options, paths, it = [], [], iter(words[1:])
    for word in it:
        if word in VALUE_OPTIONS:
            options += [word, next(it, "")]
        elif word.startswith("-"):
            options.append(word)
        else:
            paths.append(word)
    return tuple(options), tuple(paths)


def ci_problems(readme_command: str, script: str, root: Path = ROOT) -> list[str]:
    """What `.ci/run` (its text) fails to run of one README command."""
    ran = ci_commands(script)
    problems = []
    for part in readme_command.split("&&"):
        words = normalise(part)
        if words in ran:
            continue
        if words[:1] == ["pytest"]:
            options, paths = pytest_parts(words)
            covered = {p for w in ran if w[:1] == ["pytest"] and pytest_parts(w)[0] == options
                       for p in pytest_parts(w)[1]}
            missing = [p for p in paths if p not in covered
                       and not (p in ADDED_BY_THE_LAB_BRANCH and not (root / p).exists())]
            if not missing:
                continue
            problems.append(f"`{readme_command}`: .ci/run runs no `pytest {' '.join(options)}` over {missing}")
            continue
        problems.append(f"`{readme_command}`: .ci/run does not run `{' '.join(words)}`")
    return problems


def test_the_checkers_normalise_parse_and_compare(tmp_path):
    assert normalise("sudo apt-get install -y bubblewrap chromium") == \
        normalise("apt-get install -y -qq bubblewrap chromium >/dev/null")
    assert pytest_parts(normalise('pytest tests/e2e -m "not extended"')) == (("-m", "not extended"), ("tests/e2e",))
    assert pytest_parts(normalise("pytest tests/unit lab/tests -n 2")) == (("-n", "2"), ("tests/unit", "lab/tests"))
    script = ("#!/usr/bin/env bash\nset -euo pipefail\nif ! command -v bwrap; then\n"
              "  apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null\nfi\n"
              "X=$(ls)\npytest tests/unit\npytest lab/tests  # the lab\n")
    assert ci_problems("sudo apt-get install -y bubblewrap", script) == []
    assert ci_problems("pytest tests/unit lab/tests", script) == []
    (tmp_path / "lab" / "tests").mkdir(parents=True)  # once the lab's tests exist, .ci/run must run them
    assert ci_problems("pytest tests/unit lab/tests", "pytest tests/unit\n", root=tmp_path)
    assert ci_problems("pytest tests/unit lab/tests", "pytest tests/unit\n", root=tmp_path / "elsewhere") == []
    assert ci_problems("pytest tests/unit tests/e2e", script)  # tests/e2e is not run
    assert ci_problems("pip install torch", script)
    text = "## Setup\n```bash\nmake it   # comment\n```\n```mermaid\nflowchart LR\n```\n"
    assert [c.text for c in commands(text)] == ["make it"]


def test_every_readme_command_has_a_runner():
    shown = [c.text for c in commands()]
    unmapped = [c for c in shown if c not in RUNNERS]
    stale = [c for c in RUNNERS if c not in shown]
    assert not unmapped, f"README commands no test runs (add each to RUNNERS with the test that runs it): {unmapped}"
    assert not stale, f"RUNNERS names commands the README no longer shows: {stale}"


def _runs_table() -> dict[str, str]:
    """tests/e2e/test_readme.py's RUNS: which of its tests runs which README section (read without importing it)."""
    tree = ast.parse((ROOT / E2E).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "RUNS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{E2E} has no RUNS table")


@pytest.mark.parametrize("command", [c for c in commands() if RUNNERS.get(c.text, CI) != CI], ids=lambda c: c.text)
def test_the_mapped_test_runs_the_section_the_command_is_in(command):
    node = RUNNERS[command.text]
    path, function = node.split("::")
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    assert function in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}, node
    assert command.section.startswith(_runs_table().get(function, "\0")), \
        f"{node} does not run README section {command.section!r}, where `{command.text}` is"


@pytest.mark.parametrize("command", [c for c in commands() if RUNNERS.get(c.text) == CI], ids=lambda c: c.text)
def test_ci_runs_the_install_and_test_commands_as_written(command):
    problems = ci_problems(command.text, (ROOT / CI).read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)
