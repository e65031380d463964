"""Where the suites are collected from (pytest_dit_ar.loop.guards.suites): the installed harness, never a shadowed copy
the tree holds (a second worktree or clone of this repository), and explicitly when they sit in a venv inside the
project (pytest never recurses into one)."""

from __future__ import annotations

from pathlib import Path

from pytest_dit_ar.loop.guards.suites import SUITES, SuiteFiles


def installed_at(base: Path) -> SuiteFiles:
    folders = tuple((base / name).resolve() for name in SUITES)
    for folder in folders:
        folder.mkdir(parents=True)
        (folder / "test_x.py").write_text("")
    return SuiteFiles(folders, tuple(f / "test_x.py" for f in folders))


def tree(root: Path) -> Path:
    for name in SUITES:
        (root / name).mkdir(parents=True)
        (root / name / "test_x.py").write_text("")
    return root.resolve()


def test_a_worktree_s_own_copies_are_shadowed_and_redirected(tmp_path: Path) -> None:
    suites = installed_at(tmp_path / "first-clone")
    worktree = tree(tmp_path / "wt2")
    assert suites.outside(worktree) == suites.folders  # named explicitly
    assert suites.shadowed(worktree) == (worktree / "quality_suite", worktree / "perf_suite")
    assert suites.in_shadowed(worktree / "perf_suite" / "test_x.py", worktree)
    assert not suites.in_shadowed(worktree / "tests", worktree)
    assert suites.redirect("perf_suite/test_x.py::test_a", worktree, worktree) == \
        f"{suites.folders[1] / 'test_x.py'}::test_a"
    assert suites.redirect("quality_suite", worktree, worktree) == str(suites.folders[0])
    assert suites.redirect("tests/test_y.py", worktree, worktree) == "tests/test_y.py"
    assert suites.redirect("-q", worktree, worktree) == "-q"


def test_the_install_s_own_checkout_shadows_nothing(tmp_path: Path) -> None:
    root = tree(tmp_path / "repo")
    suites = SuiteFiles(tuple(root / n for n in SUITES), ())
    assert suites.outside(root) == () and suites.shadowed(root) == ()
    assert not suites.in_shadowed(root / "quality_suite", root)


def test_suites_in_a_venv_inside_the_project_are_named_explicitly(tmp_path: Path) -> None:
    root = (tmp_path / "my-dit").resolve()
    suites = installed_at(root / ".venv" / "lib" / "python3.11" / "site-packages")
    assert suites.outside(root) == suites.folders  # under the root, but never found by collecting it
    assert suites.shadowed(root) == ()
