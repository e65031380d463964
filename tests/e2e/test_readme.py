"""The README's commands, run as the README writes them (read from its code blocks, so an edit there is what runs).

* "See it work": the demo from this checkout, each candidate's verdict one the README documents
  (`pytest_dit_ar.cli.demo.DOCUMENTED`);
* "Quickstart on any CPU": doctor, init, baseline, the batched-guidance edit committed, experiment, status, in a
  project copy (the tests' fast timing settings, so a verdict takes a minute);
* "From pytest and the IDE": the experiment through pytest, the quality and speed suites, one case, the plugin off,
  in the same copy after the quickstart.

The install and test blocks are what `.ci/run` runs (tests/unit/test_readme_commands.py holds the mapping of every
README command to the test or CI step that runs it). Extended tier: the demo alone takes minutes on two cores."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from pytest_dit_ar.cli.demo import DOCUMENTED, apply, candidates
from tests.helpers.loop import env_for, git, ledger_rows, make_project_copy
from tests.helpers.readme import PROJECT, argv, in_section

# which test runs the commands of which README section (tests/unit/test_readme_commands.py reads this)
RUNS = {
    "test_the_demo_gives_the_documented_verdicts": "## See it work",
    "test_the_quickstart_runs_as_written": "## Quickstart on any CPU",
    "test_the_pytest_commands_run_as_written": "## From pytest and the IDE",
}
VERDICT = re.compile(r"^\s*VERDICT: ([A-Z-]+)\s*$", re.M)
CANDIDATE = re.compile(r"candidate (\d+)/\d+:")


def run_as_written(repo: Path, command: str, env: dict[str, str] | None = None,
                   timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(argv(command), cwd=repo, env=env or env_for(repo), capture_output=True, text=True,
                          timeout=timeout)


def verdicts_of_demo(output: str) -> list[str]:
    """Each candidate's verdict, in order ('?' where one printed none)."""
    found: dict[int, str] = {}
    current = None
    for line in output.splitlines():
        if (m := CANDIDATE.search(line)) is not None:
            current = int(m.group(1))
        elif (m := VERDICT.match(line)) is not None and current is not None:
            found.setdefault(current, m.group(1))
    return [found.get(i, "?") for i in range(1, len(candidates()) + 1)]


@pytest.mark.extended
@pytest.mark.slow
def test_the_demo_gives_the_documented_verdicts(tmp_path: Path) -> None:
    (demo,) = in_section(RUNS["test_the_demo_gives_the_documented_verdicts"])
    # the demo clones this checkout into a new temporary folder: TMPDIR puts that under this test's tmp_path
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("PYTEST_ADDOPTS", None)
    proc = run_as_written(PROJECT, demo.text, env=env, timeout=3600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    got = verdicts_of_demo(proc.stdout)
    expected = [DOCUMENTED[c.patch.stem] for c in candidates()]
    wrong = [(c.patch.stem, v, e) for c, v, e in zip(candidates(), got, expected, strict=True) if v not in e]
    assert not wrong, f"verdicts the README does not document: {wrong}\n{out[-4000:]}"
    assert "report" in proc.stdout and "demo finished" in proc.stdout


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, subprocess.CompletedProcess]]]:
    """A project copy in which the quickstart block ran, command by command; the edit before `git commit` is the
    demo's first candidate (the two guidance passes batched into one forward)."""
    repo = make_project_copy(tmp_path_factory.mktemp("readme") / "repo", slow_s=0.0)
    done = []
    for command in in_section(RUNS["test_the_quickstart_runs_as_written"]):
        if command.text.startswith("git commit"):
            apply(repo, candidates()[0])
        done.append((command.text, run_as_written(repo, command.text)))
    return repo, done


@pytest.mark.extended
@pytest.mark.slow
def test_the_quickstart_runs_as_written(quickstart) -> None:
    repo, done = quickstart
    verbs = [re.sub(r"^dit-ar (--config \S+ )?", "", text).split()[0] for text, _ in done]
    assert verbs == ["doctor", "init", "baseline", "git", "experiment", "status"], verbs
    for text, proc in done:
        out = proc.stdout + proc.stderr
        if " experiment " in f" {text} ":
            assert proc.returncode in (0, 1), out[-4000:]
            assert VERDICT.findall(proc.stdout)[-1:] in (["KEEP"], ["DISCARD-PERFORMANCE"]), out[-4000:]
        else:
            assert proc.returncode == 0, f"{text}\n{out[-4000:]}"
    rows = ledger_rows(repo)
    assert [r.status.word for r in rows][:1] == ["baseline"] and len(rows) == 2, rows
    assert rows[-1].description == "batch the two classifier-free guidance passes into one forward"
    shown = done[-1][1].stdout  # status: the session and the last rows
    assert "lane embedded-cpu" in shown and rows[-1].commit[:8] in shown, shown


@pytest.mark.extended
@pytest.mark.slow
def test_the_pytest_commands_run_as_written(quickstart) -> None:
    repo, _ = quickstart
    for command in in_section(RUNS["test_the_pytest_commands_run_as_written"]):
        if "--dit-ar-experiment" in command.text:
            (repo / "model_under_test" / "pipeline.py").open("a").write("\n# a comment: the same program\n")
            git(repo, "commit", "-qam", "a comment")
            before = len(ledger_rows(repo))
        proc = run_as_written(repo, command.text)
        out = proc.stdout + proc.stderr
        if "--dit-ar-experiment" in command.text:
            assert proc.returncode in (0, 1) and VERDICT.search(proc.stdout), out[-4000:]
            assert len(ledger_rows(repo)) == before + 1
        elif "no:dit-ar" in command.text:
            assert "the dit-ar plugin is disabled in this run" in proc.stdout, out[-4000:]
        else:
            assert proc.returncode == 0, f"{command.text}\n{out[-4000:]}"
            if "::" in command.text:
                assert "1 passed" in proc.stdout, out[-4000:]
    assert git(repo, "status", "--porcelain") == ""
