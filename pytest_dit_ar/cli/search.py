"""`dit-ar search "QUERY"`: ranked handbook pages with the matching passages and line numbers.

English, Chinese and misspelt queries are accepted (see search/engine.py). When the best page covers
less than `WEAK_COVERAGE` of the query, the output says so first (text) and sets `"weak": true` (JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from ..search.engine import FileHit, SearchResult, query_terms, search_report, snippet
from ..search.location import find_handbook, user_cache
from ..state.paths import StatePaths


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "search",
        help="search the handbook (BM25) and print ranked files with their matching passages",
        description="Search the handbook for passages relevant to QUERY; prints ranked files with line numbers.",
    )
    parser.add_argument("query", nargs="+", help="words to look for (quote a phrase or pass several words)")
    parser.add_argument("--top", type=int, default=5, help="number of files to show (default 5)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run, handler=run)
    return parser


def _repo_root(args) -> Path:
    config = getattr(args, "config", None)
    if config:
        return Path(config).resolve().parent.parent
    return Path.cwd()


def format_hits(hits: list[FileHit], query: str, result: SearchResult | None = None) -> str:
    if not hits:
        return f"no handbook passage matches {query!r}"
    terms = set(query_terms(query))
    lines = []
    if result is not None:
        if result.interpreted:
            lines.append("read as: " + "; ".join(result.interpreted))
        if result.weak and result.note:
            lines.append(f"note: {result.note}")
    for rank, hit in enumerate(hits, start=1):
        title = f" — {hit.title}" if hit.title else ""
        lines.append(f"{rank}. handbook/{hit.path}  (score {hit.score:.2f}){title}")
        for p in hit.passages:
            lines.append(f"   handbook/{hit.path}:{p.line}  {p.heading}")
            lines.append(f"      {snippet(p.text, terms)}")
    return "\n".join(lines)


def run(args) -> int:
    query = " ".join(args.query) if isinstance(args.query, (list, tuple)) else str(args.query)
    root = _repo_root(args)
    handbook = find_handbook(root)
    if handbook is None:
        print(f"dit-ar search: no handbook folder at {root / 'handbook'} and none installed with the package "
              "(reinstall pytest-dit-ar from its wheel)", file=sys.stderr)
        return 2
    cache = StatePaths(root).handbook_index
    result = search_report(query, handbook, top=max(1, int(args.top)),
                           cache_path=cache if cache.parent.is_dir() else user_cache())
    if getattr(args, "json", False):
        payload = {"query": query, "handbook": str(handbook), "weak": result.weak,
                   "coverage": result.coverage, "missing": result.missing,
                   "interpreted": result.interpreted, "note": result.note,
                   "hits": [asdict(h) for h in result.hits]}
        print(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        print(format_hits(result.hits, query, result))
    return 0
