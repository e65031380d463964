"""Every relative link in the handbook, docs/, README.md, program.md, lab/README.md and the agent entry point
resolves.

Two kinds of reference are checked, outside fenced code blocks:

* markdown links `[text](target)` whose target is not a URL: resolved against the linking file's folder;
* repository paths written in plain prose (`see docs/quality.md`), under a top-level folder of the project;
* repository paths written as code spans (`lab/probes/dit_probe.py`, `03_single_gpu/...md`): a span
  without spaces whose first segment is a top-level entry of the repository, a handbook section
  (`00_foundations`, ...), `knowledge`, `probes` or `tools` (old forms of `lab/probes/` and `lab/tools/`). It must
  exist relative to the repository root, to the file's folder, or (for handbook pages) to `handbook/`.
  Globs and `{a,b}` alternatives must match something.

Paths of other projects are written with their repository name or as URLs, so they are not mistaken
for ours. A span that names a path on purpose *because* it no longer exists (it records a move) is listed in
HISTORICAL with the reason. The dated record in lab/notebook/ is not checked here: it names the paths of its day.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

DOC_FILES = sorted(
    {ROOT / "README.md", ROOT / "program.md", ROOT / "SKILL.md", ROOT / "AGENTS.md", ROOT / "lab" / "README.md"}
    | set((ROOT / "docs").rglob("*.md"))
    | set((ROOT / "handbook").rglob("*.md"))
)
DOC_FILES = [p for p in DOC_FILES if p.is_file()]

# (file, path) pairs that mention a former location on purpose (none in the present-tense documents).
HISTORICAL: dict[tuple[str, str], str] = {}

_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_SECTION = re.compile(r"^\d\d_[a-z0-9_]+$")
_SUFFIX = re.compile(r"(::[\w.]+|:\d+(-\d+)?|#[\w-]+)$")


def _top_level() -> set[str]:
    return {p.name for p in ROOT.iterdir() if not p.name.startswith(".")} | {"knowledge", "probes", "tools"}


TOP = _top_level()


def _prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    fence = ""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if fence:
            if stripped.startswith(fence):
                fence = ""
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        yield number, line


def _expand_braces(path: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    out = []
    for alt in match.group(1).split(","):
        out.extend(_expand_braces(path[: match.start()] + alt + path[match.end():]))
    return out


def _exists(candidate: Path) -> bool:
    text = str(candidate)
    if any(ch in text for ch in "*?["):
        return bool(glob.glob(text))
    return candidate.exists()


def _resolves(doc: Path, target: str, bases: list[Path]) -> bool:
    for variant in _expand_braces(target):
        if not any(_exists(base / variant) for base in bases):
            return False
    return True


def repo_path(span: str) -> str | None:
    """The repository path a code span names, or None when the span is not a path of this repository."""
    span = span.strip().rstrip(".,;")
    if not span or any(ch.isspace() for ch in span) or "/" not in span:
        return None
    if span.startswith(("http", "/", "~", "$", ".", "-")) or "<" in span or "…" in span or "://" in span:
        return None
    span = _SUFFIX.sub("", span)
    first = span.split("/", 1)[0]
    if first in TOP or _SECTION.match(first):
        return span
    return None


# A repository path written in plain prose, without backticks (`docs/DESIGN.md §1`, "see docs/quality.md").
_BARE = re.compile(r"(?<![\w/`.:@~-])((?:docs|handbook|examples|lab|tools|tests|config|quality_suite|perf_suite|"
                   r"pytest_dit_ar|dit_ar_contract|model_under_test|assets)/[\w./{},*-]*[\w/}*])")


def bare_paths(line: str) -> list[str]:
    """Repository paths in a prose line outside code spans, links and URLs."""
    text = _SPAN.sub(" ", line)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"\S+://\S+", " ", text)
    return [_SUFFIX.sub("", m.group(1)) for m in _BARE.finditer(text)]


def references(doc: Path) -> list[tuple[int, str, str]]:
    """(line, kind, target) for every checked reference in one file."""
    found = []
    for number, line in _prose_lines(doc.read_text(encoding="utf-8")):
        for path in bare_paths(line):
            found.append((number, "path", path))
        for match in _LINK.finditer(line):
            target = match.group(1)
            if "://" in target or target.startswith(("#", "mailto:")):
                continue
            found.append((number, "link", target.split("#", 1)[0]))
        for match in _SPAN.finditer(line):
            path = repo_path(match.group(1))
            if path:
                found.append((number, "path", path))
    return found


def broken(doc: Path) -> list[str]:
    rel = doc.relative_to(ROOT).as_posix()
    bases_path = [ROOT, doc.parent] + ([ROOT / "handbook"] if rel.startswith("handbook/") else [])
    problems = []
    for number, kind, target in references(doc):
        if not target or (rel, target) in HISTORICAL:
            continue
        bases = [doc.parent] if kind == "link" else bases_path
        if not _resolves(doc, target, bases):
            problems.append(f"{rel}:{number}: {kind} {target!r} does not resolve")
    return problems


def test_the_checker_finds_paths_and_links(tmp_path):
    assert repo_path("lab/probes/dit_probe.py") == "lab/probes/dit_probe.py"
    assert repo_path("03_single_gpu/05_cuda_graphs_and_shape_buckets.md") is not None
    assert repo_path("perf_suite/roofline.py::floor_ms") == "perf_suite/roofline.py"
    assert repo_path("config/autoresearch.json:12") == "config/autoresearch.json"
    assert repo_path("hooks/first_block_cache.py") is None  # another project's path
    assert repo_path("dit-ar status --json") is None
    assert repo_path(".autoresearch/runs/<run-id>/") is None
    assert _expand_braces("a/b.{x,y}") == ["a/b.x", "a/b.y"]
    doc = tmp_path / "page.md"
    doc.write_text("See [a](missing.md) and `docs/nothing_here.py`.\n```\n`docs/in_code_is_ignored.py`\n```\n",
                   encoding="utf-8")
    kinds = [(k, t) for _, k, t in references(doc)]
    assert kinds == [("link", "missing.md"), ("path", "docs/nothing_here.py")]
    assert bare_paths("see docs/quality.md, `docs/x.md` and https://github.com/a/b/docs/y.md.") == ["docs/quality.md"]


def test_old_probe_paths_are_gone():
    """The probes live in lab/probes/; `probes/...` without `lab/` is the broken form."""
    offenders = []
    for doc in DOC_FILES:
        for number, line in _prose_lines(doc.read_text(encoding="utf-8")):
            if re.search(r"(?<![\w/])`probes/", line):
                offenders.append(f"{doc.relative_to(ROOT)}:{number}")
    assert not offenders, offenders


@pytest.mark.parametrize("doc", DOC_FILES, ids=[p.relative_to(ROOT).as_posix() for p in DOC_FILES])
def test_relative_references_resolve(doc):
    problems = broken(doc)
    assert not problems, "\n".join(problems)


def test_historical_exceptions_are_still_needed():
    """An exception whose path now exists, or whose file no longer mentions it, must be removed."""
    for (rel, path), _reason in HISTORICAL.items():
        doc = ROOT / rel
        assert doc.is_file(), rel
        assert f"`{path}`" in doc.read_text(encoding="utf-8"), (rel, path)
        assert not (ROOT / path).exists(), f"{path} exists again: drop the exception"
