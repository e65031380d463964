"""sha256 snapshots of the fixed files and of the baseline artifacts, and their verification."""

from __future__ import annotations

from pathlib import Path

from dit_ar_contract.digest import sha256_file

SKIP_DIRS = {"__pycache__", ".pytest_cache", ".benchmarks"}
SKIP_SUFFIXES = {".pyc", ".pyo"}
MANIFEST = "manifest.json"


def _files_under(base: Path) -> list[Path]:
    if base.is_file() or base.is_symlink():
        return [base]
    if not base.is_dir():
        return []
    out = []
    for path in sorted(base.rglob("*")):
        rel_parts = path.relative_to(base).parts
        if any(part in SKIP_DIRS for part in rel_parts) or path.suffix in SKIP_SUFFIXES:
            continue
        if path.is_file() or path.is_symlink():
            out.append(path)
    return out


def snapshot(root: Path, paths: list[str] | tuple[str, ...]) -> dict[str, str]:
    """sha256 of every file under the given repo-relative paths (files and folders)."""
    files: dict[str, str] = {}
    for rel in paths:
        for path in _files_under(root / rel.rstrip("/")):
            files[path.relative_to(root).as_posix()] = sha256_file(path)
    return files


def diff(expected: dict[str, str], actual: dict[str, str], gone: str = "missing") -> list[str]:
    """Human-readable differences of two name -> digest maps: changed, `gone` (missing) and added names."""
    problems = [f"changed: {p}" for p in sorted(expected) if p in actual and actual[p] != expected[p]]
    problems += [f"{gone}: {p}" for p in sorted(expected) if p not in actual]
    problems += [f"added: {p}" for p in sorted(actual) if p not in expected]
    return problems


def manifest_of(folder: Path) -> dict[str, str]:
    """sha256 of every artifact in a baseline folder, the manifest itself excluded."""
    return {p.relative_to(folder).as_posix(): sha256_file(p)
            for p in _files_under(folder) if p.name != MANIFEST or p.parent != folder}
