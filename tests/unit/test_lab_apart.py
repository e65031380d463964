"""The lab (studies, simulations, tools, device scripts, probes, recorded data) lives beside the product and never
ships: the wheel's package list, package data and source manifest leave it out, the build step copies nothing of
it, and no shipped module imports it. The import-linter contract "Shipped packages never import the lab"
(pyproject.toml, run by CI's `lint-imports`) is the primary check; this test states the same rule and the
packaging side of it."""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
from pathlib import Path

from tests.helpers import sources

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("dit_ar_contract", "pytest_dit_ar", "quality_suite", "perf_suite")
LAB = ("lab", "tools")  # `tools` is the lab's old place: it must not come back into the wheel either


def _pyproject() -> dict:
    import tomllib  # Python 3.11+, as the other tests that read pyproject.toml

    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_package_list_is_the_shipped_packages_only() -> None:
    setuptools = _pyproject()["tool"]["setuptools"]
    include = setuptools["packages"]["find"]["include"]
    assert sorted(p.rstrip("*") for p in include) == sorted(SHIPPED)
    for name in LAB:
        assert not any(fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(f"{name}.studies", pattern)
                       for pattern in include), f"{name} matches the package list {include}"
    assert not set(setuptools.get("package-data", {})) & set(LAB)
    importlinter = _pyproject()["tool"]["importlinter"]
    contract = next(c for c in importlinter["contracts"] if c["name"] == "Shipped packages never import the lab")
    assert contract["type"] == "forbidden" and contract["forbidden_modules"] == ["lab"]
    assert sorted(contract["source_modules"]) == sorted(SHIPPED) and "lab" in importlinter["root_packages"]


def test_the_source_manifest_and_the_build_step_carry_no_lab() -> None:
    manifest = (ROOT / "MANIFEST.in").read_text(encoding="utf-8").split()
    assert not [w for w in manifest if w.split("/")[0] in LAB], manifest
    setup = (ROOT / "setup.py").read_text(encoding="utf-8")
    assert '"lab"' not in setup and "'lab'" not in setup
    assert not list((ROOT / "handbook").rglob("*.py")), "the handbook ships in the wheel: no scripts in it"


def _imported(path: Path) -> set[str]:
    """The top-level names a module imports (relative imports stay inside its package)."""
    names = set()
    for node in sources.nodes(path):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_shipped_module_imports_the_lab() -> None:
    offenders = [str(path.relative_to(ROOT)) for package in SHIPPED for path in (ROOT / package).rglob("*.py")
                 if _imported(path) & set(LAB)]
    assert not offenders, f"shipped modules import the lab: {offenders}"


def test_the_checker_sees_an_import_of_the_lab(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom lab.studies import simulation\nfrom . import sibling\n")
    assert _imported(module) == {"os", "lab"}


# -- the lab's files are named for what they do ------------------------------------------------------------

# A name that says when or for whom a file was written (a wave, a device call, an issue, a review turn) says
# nothing of what it does; the dated record (lab/data/ folders, lab/notebook/ pages) may keep a session's calls.
HISTORY_NAME = re.compile(r"(wave|call|issue|turn)[-_ ]?\d", re.IGNORECASE)
RECORDS = ("data", "notebook")


def history_named(lab: Path) -> list[str]:
    """Files and folders under `lab` (outside its records) whose name is a wave, a call, an issue or a turn."""
    return sorted(path.relative_to(lab).as_posix() for path in lab.rglob("*")
                  if path.relative_to(lab).parts[0] not in RECORDS and "__pycache__" not in path.parts
                  and HISTORY_NAME.search(path.name))


def test_no_lab_file_is_named_after_a_wave_a_call_an_issue_or_a_turn() -> None:
    assert history_named(ROOT / "lab") == []


def test_a_history_name_is_found_outside_the_records_only(tmp_path: Path) -> None:
    for name in ("device/wave4_ladder.sh", "device/h200_issue17.sh", "probes/Wave-5_pool.py", "tools/review-turn_3.md",
                 "device/call2/run.sh", "data/h200/wave4/call2/x.json", "notebook/wave9.md", "device/ladder.sh",
                 "device/calibrate.sh", "probes/recall_probe.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    assert history_named(tmp_path) == ["device/call2", "device/h200_issue17.sh", "device/wave4_ladder.sh",
                                       "probes/Wave-5_pool.py", "tools/review-turn_3.md"]


# The records too are named for what they hold (and when: `night-20261207`, `study-loaded-20261203a.json`), never
# for a wave, an issue or a review turn; a dated folder may keep its device calls (`call1/`).
RECORD_HISTORY_NAME = re.compile(r"(?<![a-z])(wave|issue|turn)[-_ ]?\d", re.IGNORECASE)


def tracked_under(root: Path, top: str = "lab") -> list[str]:
    """Every file and folder git tracks under `root`/`top` (relative to `root`, posix), folders included."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", top], cwd=root, capture_output=True, check=True).stdout
    entries = set()
    for name in filter(None, listed.decode("utf-8").split("\0")):
        parts = name.split("/")
        entries.update("/".join(parts[:end]) for end in range(2, len(parts) + 1))
    return sorted(entries)


def wave_issue_or_turn_named(entries: list[str]) -> list[str]:
    return [entry for entry in entries if RECORD_HISTORY_NAME.search(entry.rsplit("/", 1)[-1])]


def test_no_tracked_lab_file_or_folder_is_named_after_a_wave_an_issue_or_a_turn() -> None:
    assert wave_issue_or_turn_named(tracked_under(ROOT)) == []


def test_a_wave_issue_or_turn_name_is_found_among_the_tracked_files_records_included(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    for name in ("lab/data/h200/wave10/call2/graphed.json", "lab/data/cpu/study-loaded-wave9b.png",
                 "lab/notebook/issue-20.md", "lab/tools/Turn3/notes.md", "lab/data/h100/night-20261207c/call1/env.txt",
                 "lab/studies/return2.py", "lab/data/cpu/verdict_study-20261203-hand-graph.txt", "docs/wave5.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    subprocess.run(["git", "add", "lab", "docs"], cwd=tmp_path, check=True)
    (tmp_path / "lab/data/untracked-wave11.txt").touch()  # not tracked: not the lab's
    assert wave_issue_or_turn_named(tracked_under(tmp_path)) == [
        "lab/data/cpu/study-loaded-wave9b.png", "lab/data/h200/wave10", "lab/notebook/issue-20.md", "lab/tools/Turn3"]


def test_every_device_script_is_listed_in_the_lab_readme() -> None:
    """lab/README.md says what each script of lab/device/ runs: a new script gets its line there."""
    readme = (ROOT / "lab" / "README.md").read_text(encoding="utf-8")
    unlisted = [p.name for p in sorted((ROOT / "lab" / "device").iterdir())
                if p.is_file() and p.suffix in (".sh", ".py") and f"`{p.name}`" not in readme]
    assert not unlisted, f"lab/device/ scripts lab/README.md does not name: {unlisted}"
