"""Figures of the house that its unit tests hold: string-keyed reads of run records outside `state/`.

    python -m tests.helpers.house_figures            # the count, per module
    python -m tests.helpers.house_figures --verbose  # with file:line and key of every read

What is counted (a static, per-function analysis of the shipped packages' source, `pytest_dit_ar/state/` left
out; a module's top-level code is one function):

* a **read** is `X["key"]` (a subscript that loads, `key` a string constant) or `X.get("key", ...)`;
* it is a **read of a run record** when `X` is *record data*, which is
  1. the result of a state reader that returns raw JSON: a call of `read_json`, `read_json_object` or
     `load_record` (state/files.py: the only readers of the files under `.autoresearch/`), or of a record's
     serialiser `as_dict()` / `to_dict()`;
  2. an attribute `Y.f` where `f` is a *raw field* of a run-record class: a dataclass field annotated with a
     `dict`, `Mapping` or `Any` type in one of `RECORD_CLASSES` (the classes that experiment.json, quality.json,
     perf.json and baseline.json are written from and read into);
  3. a name bound in the same function to record data (assignment, `for` target or comprehension variable over
     it, including over its `.items()` / `.values()`), and record data read by string key, `X or {}`, and
     `dict(X)` of record data.

Keys of other JSON (the config, the worker protocol, the corpus, the study files, pipeline configs) are not
record data: those files are read with `json.load`/`json.loads` by the modules in `OTHER_JSON`, and a test
keeps that list complete. A record class's own `from_dict` reads its parameter, which is none of the above:
the schema that names its keys once, for its writer and its readers, is not a reader outside.

Figures printed beside it, for the report: every string-keyed read in the shipped packages (any value), the
reads keyed by a side's name ("cand", "best", "candidate"), and the annotations `dict[str, Any]`.
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import sources

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dit_ar_contract", "pytest_dit_ar", "quality_suite", "perf_suite")
STATE = "pytest_dit_ar/state/"
RAW_READERS = frozenset({"read_json", "read_json_object", "load_record", "as_dict", "to_dict"})
OTHER_JSON = {  # the shipped modules outside state/ that call json.load(s), and what they read
    "dit_ar_contract/config.py": "the session's config (config/autoresearch.json)",
    "perf_suite/studies.py": "a study's result file",
    "quality_suite/case_scores.py": "the case ids in a task-scores file's metadata",
    "pytest_dit_ar/cli/demo.py": "the demo clone's config, to turn its lane's warm servers on before init",
    "pytest_dit_ar/cli/scaffold_files.py": "a diffusers pipeline's configs and the scaffold's contract template",
    "pytest_dit_ar/fleet/index.py": "the fleet's index of judged candidates (judged.jsonl)",
    "pytest_dit_ar/fleet/judging.py": "a judge's live.json bytes, read into LiveState",
    "pytest_dit_ar/report/page.py": "the config's target name, read without validating the rest (target_name)",
    "pytest_dit_ar/loop/speed/warm_servers.py":
        "the warm servers' keeper's hand-over message and its import path argument",
    "pytest_dit_ar/search/index.py": "the handbook index's cache",
    "pytest_dit_ar/worker/compile_cache.py": "a tree's compile-cache record",
    "pytest_dit_ar/worker/protocol.py": "the worker protocol's JSON lines",
    "pytest_dit_ar/worker/sandbox.py": "the sandbox's report of its namespace",
    "pytest_dit_ar/worker/warm.py": "the warm servers' record (warm-servers.json)",
    "pytest_dit_ar/worker/zygote.py": "a fork request on the fork server's socket",
    "quality_suite/clip.py": "an open_clip checkpoint folder's open_clip_config.json",
    "quality_suite/corpora.py": "a corpus and its checksums",
    "quality_suite/corpus/make_checksums.py": "the corpus checksums",
}
SIDE_KEYS = frozenset({"cand", "best", "candidate"})
RECORD_CLASSES = frozenset({
    # experiment.json
    "ExperimentRecord", "LedgerRow",
    # quality.json
    "QualityAssessment", "CaseResult", "Check",
    # perf.json
    "PerfOutcome", "PerfRecord", "SegmentRecord", "SegmentRun", "RoundRecord", "SideTiming", "MemoryFigures",
    "BlockStats",
    # baseline.json
    "BaselineSummary", "BaselineTiming", "Roofline",
})


@dataclass(frozen=True)
class Read:
    path: str
    line: int
    column: int
    key: str


def shipped_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _raw(annotation: ast.expr | None) -> bool:
    text = ast.unparse(annotation) if annotation is not None else ""
    return any(word in text for word in ("dict[", "Dict[", "Mapping[", "Any"))


def raw_fields(files: list[Path] | None = None) -> set[str]:
    """The names of the raw (dict, Mapping or Any) fields of the run-record classes."""
    names: set[str] = set()
    for path in files or shipped_files():
        for node in sources.nodes(path):
            if isinstance(node, ast.ClassDef) and node.name in RECORD_CLASSES:
                names |= {s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                          and isinstance(s.target, ast.Name) and _raw(s.annotation)}
    return names


def _key(node: ast.AST) -> tuple[ast.expr, str] | None:
    """(the object, the key) of a string-keyed read, else None."""
    if (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)):
        return node.value, node.slice.value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return node.func.value, node.args[0].value
    return None


class _Scope:
    """Record data within one function: which local names hold it."""

    def __init__(self, fields: set[str]):
        self.fields, self.names = fields, set()

    def is_record(self, node: ast.AST | None) -> bool:
        if node is None:
            return False
        if isinstance(node, ast.Name):
            return node.id in self.names
        if isinstance(node, ast.Attribute):
            return node.attr in self.fields
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in RAW_READERS:
                return True
            if name in ("dict", "list", "tuple") and node.args:
                return self.is_record(node.args[0])
            if isinstance(func, ast.Attribute) and func.attr in ("items", "values"):
                return self.is_record(func.value)
            found = _key(node)
            return found is not None and self.is_record(found[0])
        if isinstance(node, ast.Subscript):
            return self.is_record(node.value)
        if isinstance(node, ast.BoolOp):
            return any(self.is_record(v) for v in node.values)
        if isinstance(node, ast.IfExp):
            return self.is_record(node.body) or self.is_record(node.orelse)
        return False

    def bind(self, target: ast.AST) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                self.names.add(node.id)


def _bodies(path: Path) -> list[ast.AST]:
    """The module's top level and every function, each a scope of its own."""
    return [sources.tree(path), *(n for n in sources.nodes(path)
                                  if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))]


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of a scope in source order, nested functions left out (they are scopes of their own)."""
    out: list[ast.AST] = []
    stack = list(reversed(list(ast.iter_child_nodes(scope))))
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
    return out


def record_reads(path: Path, fields: set[str]) -> list[Read]:
    """The string-keyed reads of record data in one module (`fields`: the run-record classes' raw fields)."""
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    reads: list[Read] = []
    for body in _bodies(path):
        scope = _Scope(fields)
        nodes = _own_nodes(body)
        for _ in range(2):  # bindings first (a name bound below its use in a loop), then the reads
            for node in nodes:
                if isinstance(node, ast.Assign) and scope.is_record(node.value):
                    for t in node.targets:
                        scope.bind(t)
                elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and scope.is_record(node.value):
                    scope.bind(node.target)
                elif isinstance(node, (ast.For, ast.comprehension)) and scope.is_record(node.iter):
                    scope.bind(node.target)
        for node in nodes:
            found = _key(node)
            if found is not None and scope.is_record(found[0]):
                reads.append(Read(rel, node.lineno, node.col_offset, found[1]))
    return sorted(set(reads), key=lambda r: (r.path, r.line, r.column))


def json_readers() -> set[str]:
    """The shipped modules outside state/ that call `json.load` or `json.loads`."""
    found = set()
    for path in shipped_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(STATE):
            continue
        for node in sources.nodes(path):
            func = node.func if isinstance(node, ast.Call) else None
            if (isinstance(func, ast.Attribute) and func.attr in ("load", "loads") and isinstance(func.value, ast.Name)
                    and func.value.id == "json"):
                found.add(rel)
    return found


def all_keyed_reads() -> list[Read]:
    """Every string-keyed read in the shipped packages, whatever the value (outside tests)."""
    reads = []
    for path in shipped_files():
        rel = path.relative_to(ROOT).as_posix()
        if path.name.startswith("test_"):
            continue
        for node in sources.nodes(path):
            found = _key(node)
            if found is not None:
                reads.append(Read(rel, node.lineno, node.col_offset, found[1]))
    return reads


def untyped_annotations() -> int:
    """`dict[str, Any]` in the shipped packages' source (outside tests)."""
    return sum(sources.text(p).count("dict[str, Any]") for p in shipped_files()
               if not p.name.startswith("test_"))


def reads_outside_state() -> list[Read]:
    files = shipped_files()
    fields = raw_fields(files)
    return [r for p in files if not p.relative_to(ROOT).as_posix().startswith(STATE) for r in record_reads(p, fields)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    reads = reads_outside_state()
    if args.verbose:
        for r in reads:
            print(f"{r.path}:{r.line} [{r.key!r}]")
    for path, n in Counter(r.path for r in reads).most_common():
        print(f"{n:5d}  {path}")
    print(f"string-keyed reads of run records outside {STATE}: {len(reads)}")
    every = all_keyed_reads()
    print(f"string-keyed reads of any value in the shipped packages: {len(every)}")
    print(f"  of them keyed by a side's name {sorted(SIDE_KEYS)}: {sum(r.key in SIDE_KEYS for r in every)}")
    print(f"dict[str, Any] in the shipped packages: {untyped_annotations()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
