"""Every pytest node id written in the README, program.md and docs/ (guides and design pages) names a test that
collects: the file exists, it defines the test function, and a case id in brackets is a case of a corpus the project
ships."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "program.md", *sorted((ROOT / "docs").rglob("*.md"))]
NODE_ID = re.compile(r"([\w./-]+\.py)::(\w+)(?:\[([^\]\s]+)\])?")


def documented() -> list[tuple[str, str, str, str | None]]:
    found = []
    for doc in DOCS:
        for match in NODE_ID.finditer(doc.read_text(encoding="utf-8")):
            found.append((doc.name, *match.groups()))
    return found


def case_ids() -> set[str]:
    ids = set()
    for corpus in (ROOT / "quality_suite" / "corpus").glob("*.jsonl"):
        ids |= {json.loads(line)["id"] for line in corpus.read_text().splitlines() if line.strip()}
    return ids


def test_the_docs_name_some_node_ids() -> None:
    assert any(doc == "README.md" for doc, *_ in documented())


@pytest.mark.parametrize("doc,path,function,param", documented())
def test_a_documented_node_id_collects(doc: str, path: str, function: str, param: str | None) -> None:
    file = ROOT / path
    assert file.is_file(), f"{doc} names {path}, which does not exist"
    names = {n.name for n in ast.walk(ast.parse(file.read_text())) if isinstance(n, ast.FunctionDef)}
    assert function in names, f"{doc} names {path}::{function}, which {path} does not define"
    if param is not None:
        assert param in case_ids(), f"{doc} names the case {param!r}, which no shipped corpus has"
