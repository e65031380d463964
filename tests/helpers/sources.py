"""Python source files read and parsed once per test process.

Several unit tests walk every module of the shipped packages (the house's sizes, prose and record reads, the lab
kept apart, the refusals' ways out); each parse of the whole tree costs about a second and a half on a 2-core
machine. `text(path)` and `tree(path)` return one shared copy per file and version (the file's size and
modification time are part of the key, so a file a test writes anew is read anew). `nodes(path)` is the tree's
`ast.walk` order, kept too: a check that looks at every node walks the list instead of the tree. Callers read the
trees and never edit their nodes.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.lru_cache(maxsize=None)
def _read(path: Path, mtime_ns: int, size: int) -> str:
    return path.read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)
def _parse(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(_read(path, mtime_ns, size), str(path))


@functools.lru_cache(maxsize=None)
def _walk(path: Path, mtime_ns: int, size: int) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(_parse(path, mtime_ns, size)))


def _version(path: Path) -> tuple[Path, int, int]:
    stat = path.stat()
    return path, stat.st_mtime_ns, stat.st_size


def text(path: Path) -> str:
    """The file's text (UTF-8)."""
    return _read(*_version(path))


def tree(path: Path) -> ast.Module:
    """The file's module tree, shared: read it, never change it."""
    return _parse(*_version(path))


def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the file's shared tree, in `ast.walk` order."""
    return _walk(*_version(path))
