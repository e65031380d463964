"""Sessions side by side, as the docs say (docs/guide/sessions-side-by-side.md), with the harness installed as a user
installs it.

The exact commands of the issue, in a second git worktree of a project checkout: `git worktree add`, `dit-ar init`,
`dit-ar baseline`, one no-op commit, `dit-ar experiment`. The harness comes from a wheel, or from an editable
install of the *other* checkout (the first clone): either way the worktree's own `quality_suite/` and
`perf_suite/` are not the imported ones and must not be collected ("import file mismatch"). No PYTHONPATH: the
venvs are made by tests/helpers/venv.py. And the layout of the README's Install section in a user's repository,
the venv inside the project (`.venv/`): the installed suites there are collected, and `.gitignore` keeps it out
of git.

The cheap variants (collection and a refusal that comes only after a clean collection) run in CI; whole sessions,
one after the other and two at the same time, are in the extended tier.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers.loop import commit_change, git, make_project_copy
from tests.helpers.venv import Venv, build_wheel, make_venv

PROJECT = Path(__file__).resolve().parents[2]
INSTALLS = ("wheel", pytest.param("editable", marks=pytest.mark.extended))  # CI: the wheel
EXPERIMENT = ("experiment", "--classification", "exact", "--description", "a comment: the same program")


@pytest.fixture(scope="module")
def first_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's first checkout of the project (the editable install points here)."""
    return make_project_copy(tmp_path_factory.mktemp("clone") / "first")


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Venv:
    """The wheel in a fresh venv, shared by this module's tests (none of them changes what is installed)."""
    return make_venv(tmp_path_factory.mktemp("venv-wheel") / "venv", str(wheel))


@pytest.fixture(scope="module", params=INSTALLS)
def installed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, first_clone: Path) -> Venv:
    if request.param == "wheel":
        return request.getfixturevalue("wheel_venv")
    base = tmp_path_factory.mktemp(f"venv-{request.param}")
    return make_venv(base / "venv", "--no-build-isolation", "-e", str(first_clone))


def add_worktree(clone: Path, name: str) -> Path:
    """`git worktree add -b autoresearch/NAME ../NAME` (docs/guide/sessions-side-by-side.md)."""
    where = clone.parent / name
    if not where.exists():
        git(clone, "worktree", "add", "-q", "-b", f"autoresearch/{name}", str(where))
    return where


def collected_files(venv: Venv, tree: Path) -> str:
    proc = venv.run(tree, str(venv.python), "-m", "pytest", "--collect-only", "-q", "-m", "quality or perf",
                    "-p", "no:cacheprovider")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "mismatch" not in out
    return out


def test_a_worktree_collects_the_installed_suites(installed: Venv, first_clone: Path) -> None:
    tree = add_worktree(first_clone, f"wt-{installed.root.parent.name}")
    suites = installed.where("quality_suite").parent
    assert tree not in suites.parents  # the worktree's own copy is not the harness
    installed.dit_ar(tree, "init", "--tag", tree.name)
    out = collected_files(installed, tree)
    assert "test_quality.py::" in out and "test_perf.py::" in out, out[-3000:]
    assert str(tree / "quality_suite") not in out
    # an experiment collects the suites and only then refuses (no baseline yet): not "collection failed"
    proc = installed.dit_ar(tree, *EXPERIMENT, expect=2)
    last = next(line for line in proc.stdout.splitlines() if line.startswith("REFUSED:"))
    assert "baseline" in last and "collection failed" not in last, proc.stdout[-2000:]
    assert "test session starts" not in proc.stdout  # a refusal of `dit-ar experiment`: no pytest banner
    assert "import file mismatch" not in proc.stdout + proc.stderr


def run_session(venv: Venv, tree: Path) -> str:
    """init, baseline, a no-op commit and the experiment; returns the verdict line."""
    venv.dit_ar(tree, "init", "--tag", tree.name)
    venv.dit_ar(tree, "baseline", "--quiet")
    commit_change(tree, "model_under_test/pipeline.py", "\n# a comment: the same program\n", "a comment")
    return verdict_of(venv.dit_ar(tree, *EXPERIMENT, expect=None))


def verdict_of(proc) -> str:
    last = proc.stdout.rstrip().splitlines()[-1] if proc.stdout.strip() else ""
    assert last in ("VERDICT: DISCARD-PERFORMANCE", "VERDICT: KEEP"), proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "import file mismatch" not in proc.stdout
    return last


def ledger_statuses(tree: Path) -> list[str]:
    lines = (tree / ".autoresearch" / "results.tsv").read_text().splitlines()
    status = lines[0].split("\t").index("status")
    return [line.split("\t")[status] for line in lines[1:]]


@pytest.mark.slow
@pytest.mark.extended
def test_a_worktree_session_end_to_end(installed: Venv, first_clone: Path) -> None:
    tree = add_worktree(first_clone, f"wt-session-{installed.root.parent.name}")
    run_session(installed, tree)
    assert ledger_statuses(tree)[0] == "baseline" and len(ledger_statuses(tree)) == 2
    assert not (first_clone / ".autoresearch" / "results.tsv").exists()  # the first clone's state is untouched


@pytest.mark.slow
@pytest.mark.extended
def test_two_worktrees_one_after_the_other_and_at_once(tmp_path: Path) -> None:
    clone = make_project_copy(tmp_path / "clone")
    venv = make_venv(tmp_path / "venv", "--no-build-isolation", "-e", str(clone))
    trees = [add_worktree(clone, name) for name in ("left", "right")]
    for tree in trees:  # one after the other
        run_session(venv, tree)
    for tree in trees:  # and at the same time: separate state, locks and ledgers
        commit_change(tree, "model_under_test/pipeline.py", "\n# another comment\n", "another comment")
    procs = [venv.popen(tree, str(venv.root / "bin" / "dit-ar"), *EXPERIMENT) for tree in trees]
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        verdict_of(type("P", (), {"stdout": out, "stderr": err})())
    for tree in trees:
        assert len(ledger_statuses(tree)) == 3, tree
        assert (tree / ".autoresearch" / "lock").exists()
        session = json.loads((tree / ".autoresearch" / "session.json").read_text())
        assert session["tag"] == tree.name


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.mark.extended
def test_the_venv_inside_a_users_project(tmp_path: Path, wheel: Path) -> None:
    """README's layout in a scaffolded repository: `.venv/` in the project root with the harness installed."""
    from tests.helpers.tiny_pipelines import save_tiny

    repo = tmp_path / "my-dit"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "tests@example.invalid")
    git(repo, "config", "user.name", "dit-ar tests")
    save_tiny("DiTPipeline", repo / "weights" / "tiny-dit")
    venv = make_venv(repo / ".venv", str(wheel))
    venv.dit_ar(repo, "scaffold", "--pipeline", "weights/tiny-dit", "--device", "cpu", "--steps", "2", "--cases", "2")
    assert ".venv/" in (repo / ".gitignore").read_text().splitlines()
    git(repo, "add", "-A")
    assert not [p for p in git(repo, "status", "--porcelain").splitlines() if ".venv" in p]
    git(repo, "commit", "-qm", "Set up dit-ar")
    venv.dit_ar(repo, "init", "--tag", "first")
    out = collected_files(venv, repo)
    assert "test_quality.py::" in out, out[-3000:]
    proc = venv.dit_ar(repo, *EXPERIMENT, expect=2)
    last = proc.stdout.rstrip().splitlines()[-1]
    assert "baseline" in last and "site-packages" not in last and "not selected" not in last, last


def test_the_guides_come_with_the_wheel(tmp_path: Path, wheel_venv: Venv) -> None:
    """`dit-ar guide` prints the task guides from the installed package (setup.py copies docs/guide/ into it), in a
    folder with no checkout around: the list, a guide whose text is the repository's page (its links to other guides
    written as the command that prints them), and an unknown name refused with the list and a way out."""
    venv = wheel_venv
    assert (venv.where("pytest_dit_ar").parent / "guides" / "your-own-model.md").is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listing = venv.dit_ar(elsewhere, "guide").stdout
    pages = sorted(p.stem for p in (PROJECT / "docs" / "guide").glob("*.md") if p.name != "README.md")
    assert all(f"  {name} " in listing for name in pages), listing
    page = venv.dit_ar(elsewhere, "guide", "your-own-model").stdout
    source = (PROJECT / "docs" / "guide" / "your-own-model.md").read_text(encoding="utf-8")
    assert page == re.sub(r"\]\(([a-z0-9-]+)\.md\)", r"](`dit-ar guide \1`)", source)
    refused = venv.dit_ar(elsewhere, "guide", "nope", expect=2)
    assert "your-own-model" in refused.stderr and "way out: `dit-ar guide`" in refused.stderr
