"""The house's shape, kept: no import circle among the project's modules, no file over 600 lines and no class
over 150 in the shipped packages, their comments and docstrings in the present tense, and run records read
through typed readers in state/ (string-keyed reads of them elsewhere counted and bounded)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import grimp
import networkx as nx

from tests.helpers import house_figures, sources

PACKAGES = ("dit_ar_contract", "pytest_dit_ar", "quality_suite", "perf_suite")


def import_circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """One circle (a -> b -> ... -> a) for every group of modules that import each other, directly or not."""
    g = nx.DiGraph()
    for module in sorted(graph.modules):
        g.add_node(module)
        g.add_edges_from((module, imported) for imported in sorted(graph.find_modules_directly_imported_by(module)))
    circles = []
    for group in nx.strongly_connected_components(g):
        if len(group) > 1:
            path = [a for a, _ in nx.find_cycle(g.subgraph(group), source=min(group))]
            start = path.index(min(path))  # the same circle reads the same from run to run
            path = path[start:] + path[:start]
            circles.append(path + [path[0]])
    return sorted(circles)


def test_no_import_circles() -> None:
    """grimp (import-linter's own graph) reads every import, those under TYPE_CHECKING and inside functions
    included: a circle of type-only imports is still two modules that cannot be read one without the other."""
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    circles = import_circles(graph)
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_a_circle_is_found_and_named() -> None:
    graph = grimp.ImportGraph()
    for module in ("p.a", "p.b", "p.c", "p.d"):
        graph.add_module(module)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    graph.add_import(importer="p.c", imported="p.a")
    graph.add_import(importer="p.c", imported="p.d")
    assert import_circles(graph) == [["p.a", "p.b", "p.c", "p.a"]]


# -- sizes ---------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
MAX_FILE_LINES = 600
MAX_CLASS_LINES = 150


def shipped_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def oversized(files: list[Path]) -> list[str]:
    """Files over MAX_FILE_LINES lines and classes over MAX_CLASS_LINES (decorators to last line), named."""
    found = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
        lines = len(sources.text(path).splitlines())
        if lines > MAX_FILE_LINES:
            found.append(f"{rel}: {lines} lines (at most {MAX_FILE_LINES})")
        for node in sources.nodes(path):
            if isinstance(node, ast.ClassDef):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                size = (node.end_lineno or node.lineno) - first + 1
                if size > MAX_CLASS_LINES:
                    found.append(f"{rel}:{node.lineno} class {node.name}: {size} lines (at most {MAX_CLASS_LINES})")
    return found


def test_no_file_over_600_lines_and_no_class_over_150_in_the_shipped_packages() -> None:
    assert oversized(shipped_files()) == []


def test_an_oversized_file_and_class_are_named(tmp_path: Path) -> None:
    big = tmp_path / "big.py"
    big.write_text("@dataclass\nclass Big:\n" + "    x = 1\n" * MAX_CLASS_LINES + "\n" * (MAX_FILE_LINES - 150))
    assert oversized([big]) == [f"big.py: {MAX_FILE_LINES + 2} lines (at most {MAX_FILE_LINES})",
                                f"big.py:2 class Big: {MAX_CLASS_LINES + 2} lines (at most {MAX_CLASS_LINES})"]


# -- comments and docstrings in the present tense ------------------------------------------------------

HISTORY = re.compile(r"\bwaves?\b|\bnotes? \d+|\bissues? #?\d+|\b20\d\d-\d\d\b"
                     r"|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b", re.IGNORECASE)


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every docstring line (module, class, function) of a module, and of every comment (tokenize)
    where the module's text matches HISTORY at all: a comment is a verbatim piece of that text, so a text without
    a match has no comment with one (and tokenizing every module would cost more than the rest of the check)."""
    source = sources.text(path)
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT] if HISTORY.search(source) else []
    for node in sources.nodes(path):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found += [(first.value.lineno + i, line) for i, line in enumerate(first.value.value.splitlines())]
    return sorted(found)


def history_lines(files: list[Path]) -> list[str]:
    """Comment and docstring lines that narrate history: a wave, a note or issue number, a date, a commit hash."""
    found = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
        for line, text in prose(path):
            match = HISTORY.search(text)
            if match:
                found.append(f"{rel}:{line}: {match.group(0)!r} in {text.strip()[:100]!r}")
    return found


def test_shipped_comments_and_docstrings_are_in_the_present_tense() -> None:
    """History (dated results, decisions by wave, design-note and issue numbers) goes to lab/notebook/ and
    CHANGELOG.md; a shipped comment says what the code does and why, now."""
    assert history_lines(shipped_files()) == []


def test_history_in_a_comment_or_docstring_is_named_and_code_is_not(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""Measured in wave 6."""\n\nSEED = 0x5eed1234  # see note 47\nWHEN = "2026-12-01"\n\n\n'
                      'def f():\n    """Kept since abc1234."""\n    return "issue 37"\n')
    assert [line.split(":")[1] for line in history_lines([module])] == ["1", "3", "8"]


# -- run records read through types --------------------------------------------------------------------

MAX_RECORD_READS = 50


def test_run_records_are_read_by_string_key_at_most_50_times_outside_state() -> None:
    """What counts is tests/helpers/house_figures.py's documented definition: `x["key"]` or `x.get("key")` on
    record data (a state reader's raw JSON, a record's serialised dict, a dict field of a run-record class, or
    a name bound to one of these) in the shipped packages outside pytest_dit_ar/state/."""
    reads = house_figures.reads_outside_state()
    assert len(reads) <= MAX_RECORD_READS, "\n".join(f"{r.path}:{r.line} [{r.key!r}]" for r in reads)


def test_other_json_is_read_only_where_the_figure_says() -> None:
    """A new json.load(s) outside state/ may read a run record behind the state readers' back: name what it reads
    in OTHER_JSON, or read the record through state/."""
    assert house_figures.json_readers() == set(house_figures.OTHER_JSON)


def test_the_count_follows_record_data_and_nothing_else(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "def f(paths, perf, spec):\n"
        "    data = load_record(paths.perf)\n"
        "    look = data.get('look') or {}\n"           # 1: a raw read of a record, and what it binds
        "    z = look['z']\n"                           # 2
        "    for seg in data['segments']:\n"            # 3
        "        seg['cand_s']\n"                       # 4
        "    perf.guardrails.get('p95')\n"              # 5: a raw field of a record class
        "    spec['steps']\n"                           # not record data
        "    local = {'a': 1}\n"
        "    return local['a'], perf.to_dict()['keep']\n")  # 6: a serialised record
    reads = house_figures.record_reads(module, {"guardrails"})
    assert [r.key for r in reads] == ["look", "z", "segments", "cand_s", "p95", "keep"]
