"""Native to pytest users: refusals once and in one line, harness errors never blamed on the candidate,
the ini form of an experiment refused, the plugin disabled by either name, the user's own checks with the
documented fixtures, failing cases listed with their pictures, and a CLI that behaves in a pipe."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dit_ar.loop.speed.patching import wrap_generate
from tests.helpers.loop import PROJECT, env_for, git, ledger_rows, make_project_copy, run, set_slow

EXPERIMENT = ("--dit-ar-experiment", "--dit-ar-description", "x", "-W", "ignore::pytest.PytestAssertRewriteWarning")


def pytest_in(repo: Path, *args: str, extra_path: Path | None = None) -> subprocess.CompletedProcess:
    env = env_for(repo)
    if extra_path is not None:
        env["PYTHONPATH"] = f"{extra_path}:{env['PYTHONPATH']}"
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=900)


def unchanged(repo: Path) -> tuple:
    return git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain"), ledger_rows(repo)


@pytest.mark.extended  # CI's 15-minute budget (design note 42); the full end-to-end tier runs it
def test_a_classification_from_the_ini_is_validated(loop_repo: Path) -> None:
    set_slow(loop_repo, 0.0, "faster")
    before = unchanged(loop_repo)
    proc = pytest_in(loop_repo, "-o", "dit_ar_classification=fast", *EXPERIMENT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert out.count("must be one of exact, numerical, approximate, quantization; got 'fast'") == 1
    assert "Traceback" not in out and "ValueError" not in out
    assert unchanged(loop_repo) == before


def test_the_ini_form_of_an_experiment_is_refused(loop_repo: Path) -> None:
    before = unchanged(loop_repo)
    proc = pytest_in(loop_repo, "-o", "dit_ar_experiment=true", "-o", "dit_ar_classification=exact")
    assert proc.returncode == 4 and "command line only" in proc.stderr, proc.stdout[-2000:] + proc.stderr
    assert unchanged(loop_repo) == before


@pytest.mark.extended
def test_an_unknown_lane_is_the_same_one_line_refusal_everywhere(loop_repo: Path) -> None:
    plain = pytest_in(loop_repo, "--dit-ar-lane", "nope", "-m", "quality", "quality_suite")
    experiment = run(loop_repo, "experiment", "--classification", "exact", "--description", "x", "--lane", "nope")
    for proc in (plain, experiment):
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, out[-3000:]
        assert "Traceback" not in out and "collection failed" not in out.lower()
        assert out.count("found 'nope', expected one of the lanes") == 1, out[-2000:]
        assert out.rstrip().splitlines()[-1].startswith("REFUSED: ")


BREAKERS = {  # a bug inside a fixture's harness code; a bug in a setup step outside the fixtures
    "fixture": '''
import pytest_dit_ar.loop.quality.assess as quality

def _broken(*args, **kwargs):
    raise KeyError("a bug in the harness's own code")

def pytest_configure(config):
    quality.assess = _broken
''',
    "setup": '''
def pytest_runtest_setup(item):
    if item.get_closest_marker("quality"):
        raise LookupError("a setup step of the harness failed")
''',
}


@pytest.mark.extended
@pytest.mark.parametrize("bug", sorted(BREAKERS))
def test_a_harness_error_is_not_recorded_as_the_candidates_failure(loop_repo: Path, tmp_path: Path, bug: str) -> None:
    # the plugin's own folder, not tmp_path: tmp_path holds the repo and is root-only (0700), and a folder on
    # sys.path is bound whole into the sandboxes, so the workers (run as nobody) could not reach the harness
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "breaker.py").write_text(BREAKERS[bug])
    set_slow(loop_repo, 0.0, "faster")
    before = unchanged(loop_repo)
    proc = pytest_in(loop_repo, "-p", "breaker", "--dit-ar-classification", "exact", *EXPERIMENT, extra_path=plugins)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "not the candidate" in out and "HEAD was kept" in out
    assert "VERDICT" not in out
    assert unchanged(loop_repo) == before  # no reset, no ledger row


@pytest.mark.extended  # CI's 15-minute budget (design note 42); the full end-to-end tier runs it
def test_without_a_session_the_refusal_is_said_once(tmp_path: Path) -> None:
    repo = make_project_copy(tmp_path / "repo")
    proc = pytest_in(repo, "-m", "quality", "quality_suite")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert out.count("no session in") == 1 and "init --tag" in out


def test_the_plugin_is_disabled_by_the_name_pytest_shows(loop_repo: Path) -> None:
    proc = pytest_in(loop_repo, "-p", "no:dit-ar", "quality_suite/test_quality.py", "-q")
    assert "the dit-ar plugin is disabled in this run" in proc.stdout
    assert not list((loop_repo / ".autoresearch/runs").glob("*-plain-*"))  # nothing was generated


@pytest.mark.extended
@pytest.mark.slow
def test_own_checks_with_the_documented_fixtures_and_failures_with_pictures(loop_repo: Path) -> None:
    shutil.copytree(PROJECT / "examples" / "own-checks", loop_repo / "own_checks")
    good = pytest_in(loop_repo, "own_checks", "-q")
    assert good.returncode == 0 and "81 passed" in good.stdout, good.stdout[-3000:]
    init = loop_repo / "model_under_test" / "__init__.py"  # a darker image for every case
    init.write_text(init.read_text() + wrap_generate("dark", """\
        out = _gen(requests)
        out.images = out.images * 0.9
        return out"""))
    dark = pytest_in(loop_repo, "own_checks", "quality_suite", "-q")
    assert dark.returncode == 1
    assert "the candidate is" in dark.stdout and "darker than the baseline" in dark.stdout
    assert "dit-ar quality failures" in dark.stdout
    lines = [line for line in dark.stdout.splitlines() if "(needs" in line and line.strip().endswith(".png")]
    assert lines, dark.stdout[-3000:]
    pictures = {Path(line.split()[-1]) for line in lines}
    assert len(pictures) >= 20 and all(p.is_file() for p in pictures)  # one picture per failing case


@pytest.mark.extended
def test_the_cli_version_completion_and_a_closed_pipe(loop_repo: Path) -> None:
    assert run(loop_repo, "--version").stdout.startswith("dit-ar ")
    assert "complete" in run(loop_repo, "--print-completion", "bash").stdout
    for verb in ("status --json", "doctor", "search 'batched guidance' --json"):
        proc = subprocess.run(f"{sys.executable} -m pytest_dit_ar.cli {verb} | head -c 20", shell=True,
                              cwd=loop_repo, env=env_for(loop_repo), capture_output=True, text=True, timeout=300)
        assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
