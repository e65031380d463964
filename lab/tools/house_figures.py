"""Figures of the house the reviews measure (issue 24): string-keyed reads of run records outside state/, change-class
literals outside their enum, and the longest classes.

    python -m lab.tools.house_figures            # all three
    python -m lab.tools.house_figures --verbose  # with file:line of every hit

A *string-keyed read of a run record* is `x["key"]` or `x.get("key")` in a module that reads run records (the report
and `dit-ar status`), where `key` is a key of a record the run folder holds (the ledger columns and the keys the
record writers emit). A *change-class literal* is one of the four class words as a string constant anywhere in the
shipped packages but `dit_ar_contract/classes.py` (docstrings and f-string text do not count; nor does the handbook
search, `pytest_dit_ar/search/`, whose term maps hold the English words of a query, not class identifiers).
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pytest_dit_ar", "dit_ar_contract", "quality_suite", "perf_suite")
READERS = ("pytest_dit_ar/report", "pytest_dit_ar/cli/status.py")
CLASS_WORDS = {"exact", "numerical", "approximate", "quantization"}
ENUM_FILE = "dit_ar_contract/classes.py"
RECORD_KEYS = {
    # ledger columns / experiment.json
    "timestamp", "run_id", "lane", "commit", "parent", "status", "declared_class", "effective_class", "metric",
    "best_before", "candidate", "improvement_pct", "p_value", "peak_vram_mb", "quality_summary", "description",
    "run_dir", "reason", "flags", "reasons", "duration_s", "seconds", "software",
    # perf.json
    "keep", "segments", "blocks", "look", "stats", "divergence", "cand_s", "best_s", "index", "guardrails",
    # quality.json
    "per_case", "fidelity", "checks", "failures", "audit_reasons", "summary", "aggregate", "task_candidate",
    # baseline.json, session.json, best.json, profile.json
    "timing", "median_ms", "p95_ms", "noise_floor_pct", "noise_interval_pct", "aa_segment", "aa_block",
    "task_metrics", "envelope", "environment", "workload", "device", "tag", "branch", "lane_id", "on_target",
    "measurements", "stages", "stage_ms", "top_ops", "name", "kind",
}


def _files(prefixes: tuple[str, ...]) -> list[Path]:
    out: list[Path] = []
    for prefix in prefixes:
        path = ROOT / prefix
        out += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def keyed_reads(verbose: bool) -> int:
    hits = []
    for path in _files(READERS):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            key = None
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                key = node.slice.value
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                  and node.args and isinstance(node.args[0], ast.Constant)):
                key = node.args[0].value
            if isinstance(key, str) and key in RECORD_KEYS:
                hits.append(f"{path.relative_to(ROOT)}:{node.lineno} [{key!r}]")
    if verbose:
        print("\n".join(hits))
    return len(hits)


def class_literals(verbose: bool) -> int:
    hits = []
    for path in _files(PACKAGES):
        rel = path.relative_to(ROOT).as_posix()
        if rel == ENUM_FILE or rel.startswith("pytest_dit_ar/search/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        joined = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in CLASS_WORDS
                    and id(node) not in skip and id(node) not in joined):
                hits.append(f"{rel}:{node.lineno} {node.value!r}")
    if verbose:
        print("\n".join(hits))
    return len(hits)


def longest_classes(n: int = 5) -> list[tuple[int, str]]:
    sizes = []
    for path in _files(PACKAGES):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                sizes.append((node.end_lineno - node.lineno + 1, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"))
    return sorted(sizes, reverse=True)[:n]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    print(f"string-keyed reads of run records in {', '.join(READERS)}: {keyed_reads(args.verbose)}")
    print(f"change-class literals outside {ENUM_FILE}: {class_literals(args.verbose)}")
    print("longest classes (lines):")
    for size, where in longest_classes():
        print(f"  {size:4d}  {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
