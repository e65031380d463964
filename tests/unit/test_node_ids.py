"""Failing suite tests are printed as node ids that can be pasted back, also from a wheel-installed project
whose suites live in site-packages (outside the rootdir)."""

from __future__ import annotations

from pathlib import Path

from pytest_dit_ar.loop.guards.suites import SuiteFiles
from pytest_dit_ar.plugin.node_ids import pasteable, resolve_suite_args

CASE = "test_case_against_baseline[digit7-s1071]"


def installed(tmp_path: Path) -> SuiteFiles:
    site = tmp_path / "venv" / "lib" / "site-packages"
    quality, perf = site / "quality_suite", site / "perf_suite"
    for folder, name in ((quality, "test_quality.py"), (perf, "test_perf.py")):
        folder.mkdir(parents=True)
        (folder / name).write_text("")
    return SuiteFiles((quality, perf), (quality / "test_quality.py", perf / "test_perf.py"))


def test_an_id_as_pytest_prints_it_for_an_installed_suite_names_the_installed_module(tmp_path: Path) -> None:
    suites = installed(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    module = suites.tests[0]
    args = [f"test_quality.py::{CASE}", f"quality_suite/test_quality.py::{CASE}", "perf_suite/test_perf.py",
            "-m", "my_tests/test_x.py::t"]
    assert resolve_suite_args(args, project, suites) == [f"{module}::{CASE}", f"{module}::{CASE}",
                                                         str(suites.tests[1]), "-m", "my_tests/test_x.py::t"]


def test_a_file_that_exists_where_the_user_stands_is_left_alone(tmp_path: Path) -> None:
    suites = installed(tmp_path)
    project = tmp_path / "project"
    (project / "quality_suite").mkdir(parents=True)
    (project / "quality_suite" / "test_quality.py").write_text("")  # this repository: the suites at the root
    args = [f"quality_suite/test_quality.py::{CASE}"]
    assert resolve_suite_args(args, project, suites) == args


def test_the_printed_ids_are_paths_from_the_invocation_folder(tmp_path: Path) -> None:
    suites = installed(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    outside = pasteable(suites.tests[0], f"test_quality.py::{CASE}", project)
    assert outside == f"{suites.tests[0]}::{CASE}" and Path(outside.split("::")[0]).is_file()
    (project / "quality_suite").mkdir()
    inside = project / "quality_suite" / "test_quality.py"
    inside.write_text("")
    assert pasteable(inside, f"quality_suite/test_quality.py::{CASE}", project) == \
        f"quality_suite/test_quality.py::{CASE}"
