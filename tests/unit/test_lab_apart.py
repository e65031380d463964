"""The lab (studies, simulations, tools, device scripts, probes, recorded data) lives beside the product and never
ships: the wheel's package list, package data and source manifest leave it out, the build step copies nothing of
it, and no shipped module imports it. The import-linter contract "Shipped packages never import the lab"
(pyproject.toml, run by CI's `lint-imports`) is the primary check; this test states the same rule and the
packaging side of it."""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

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
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
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
