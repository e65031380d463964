"""BM25 retrieval over the handbook; the `dit-ar search` verb is cli/search.py.

The handbook is split into passages (one per paragraph, list, table or code block), each carrying the
heading it sits under and the file's title. A passage is scored with a BM25F-style formula: term
frequencies from the passage body, its heading (weighted more) and the file title plus file name
(weighted more still) are combined before the usual BM25 saturation. Adjacent-word pairs are indexed
too, so "cuda graphs" prefers passages where those words stand together. A file's score is its best
passage plus a smaller share of its next two, so one long file cannot win on volume alone.

Queries are planned word by word (`query_plan`): an English word gives its normalised forms plus a few
synonyms (`EXPANSIONS`); a word the handbook does not contain is corrected to the closest handbook word
within one or two edits (rapidfuzz's optimal-string-alignment distance), or split into two handbook words
("grpahs" -> "graphs", "ridgepoint" -> "ridge point"); a run of Chinese characters is segmented (jieba) and
translated with the dictionary in `zh.py`, and what the dictionary does not know is matched as character
bigrams. The ranking itself stays this package's: no BM25 library scores fractional, per-field term counts
with the project's passage length. rapidfuzz and jieba are imported only when a query needs them. Every
result says how much of the query the best page covers (`SearchResult.coverage`); below `WEAK_COVERAGE` the
match is reported as weak. The parts: words.py (tokens), index.py (passages and the index), query.py (query
planning), this module (ranking and the API).

API:
    search(query, handbook_dir, top=5, cache_path=None) -> list[FileHit]
    search_report(query, handbook_dir, top=5, cache_path=None) -> SearchResult   # hits + weak flag + notes
    build_index(handbook_dir, cache_path=None) -> Index      # cached by file hashes when cache_path given
    search_index(index, query, top=5) -> list[FileHit];  report_index(index, query, top=5) -> SearchResult
    query_terms(query) -> dict[str, float];  query_plan(query, index=None) -> list[QueryGroup]
    snippet(text, terms) -> str                              # a passage cut around its first matching word
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from .index import Index, build_index
from .query import QueryGroup, flatten, query_plan, query_terms
from .words import WORD, norm

__all__ = ["FileHit", "Index", "Passage", "SearchResult", "build_index", "query_plan", "query_terms", "report_index",
           "search", "search_index", "search_report", "snippet"]

# BM25 parameters; a file's score is its best passage plus a share of its next two.
K1 = 1.2
B = 0.6
SECOND_PASSAGE_SHARE = 0.25
# Index pages list every topic; they should not outrank the page they point to. The glossary repeats
# every term (in English and Chinese) and counts less for the same reason.
# The bibliography (09_reference/03_sources.md) names every technique next to its paper; it is where to
# look up a citation, not an answer, so it counts half, like the index page.
FILE_WEIGHTS = {"README.md": 0.5, "04_glossary.md": 0.6, "03_sources.md": 0.5}
# Reference lists (a page's "Sources" section) repeat keywords from everywhere; they count less.
HEADING_WEIGHTS = {"sources": 0.6, "source": 0.6, "references": 0.6}
MAX_PASSAGES_PER_FILE = 3
# Below this share of the query's weight (idf) found in the best page, a match is reported as weak.
WEAK_COVERAGE = 0.6


@dataclass
class Passage:
    line: int
    heading: str
    text: str
    score: float = 0.0


@dataclass
class FileHit:
    path: str
    score: float
    title: str = ""
    passages: list[Passage] = field(default_factory=list)
    coverage: float = 1.0                                  # share of the query's weight found in this file
    missing: list[str] = field(default_factory=list)       # query words this file does not contain


def _bm25(index: Index, terms: dict[str, float]) -> dict[int, float]:
    scores: dict[int, float] = {}
    for term, qweight in terms.items():
        idf = index.idf.get(term)
        if idf is None:
            continue
        for i in index.postings.get(term, ()):
            d = index.docs[i]
            tf = d.tf[term]
            norm = K1 * (1.0 - B + B * d.length / index.avg_len)
            scores[i] = scores.get(i, 0.0) + qweight * idf * tf * (K1 + 1.0) / (tf + norm)
    return scores


# --------------------------------------------------------------------------------------------------
# Search


@dataclass
class SearchResult:
    """Ranked files plus what the reader should know about the match."""

    query: str
    hits: list[FileHit]
    weak: bool = False
    coverage: float = 0.0                 # share of the query's weight found in the best page
    missing: list[str] = field(default_factory=list)       # query words the best page does not contain
    interpreted: list[str] = field(default_factory=list)   # "grpahs -> graphs", "显存 -> memory vram"
    note: str = ""


def _group_weight(index: Index, group: QueryGroup) -> float:
    known = [index.idf[t] for t in group.terms if "+" not in t and t in index.idf]
    return max(known) if known else index.max_idf


def _coverage(index: Index, groups: list[QueryGroup], path: str) -> tuple[float, list[str]]:
    counted = [g for g in groups if g.counted and g.terms]
    if not counted:
        return 0.0, []
    file_terms = index.file_terms(path)
    total = matched = 0.0
    missing = []
    for group in counted:
        weight = _group_weight(index, group)
        total += weight
        if any(t in file_terms for t in group.terms if "+" not in t):
            matched += weight
        else:
            missing.append(group.source)
    return (matched / total if total else 0.0), missing


def _rank(index: Index, terms: dict[str, float], top: int) -> list[FileHit]:
    scores = _bm25(index, terms)
    by_file: dict[str, list[tuple[float, int]]] = {}
    for i, s in scores.items():
        s *= HEADING_WEIGHTS.get(index.docs[i].heading.strip().lower(), 1.0)
        by_file.setdefault(index.docs[i].path, []).append((s, i))
    hits: list[FileHit] = []
    for path, ranked in by_file.items():
        ranked.sort(key=lambda x: (-x[0], index.docs[x[1]].line))
        best = ranked[0][0]
        rest = sum(s for s, _ in ranked[1:3])
        file_score = (best + SECOND_PASSAGE_SHARE * rest) * FILE_WEIGHTS.get(Path(path).name, 1.0)
        passages = [
            Passage(index.docs[i].line, index.docs[i].heading, index.docs[i].text, round(s, 4))
            for s, i in ranked[:MAX_PASSAGES_PER_FILE]
        ]
        hits.append(FileHit(path, round(file_score, 4), index.docs[ranked[0][1]].title, passages))
    hits.sort(key=lambda h: (-h.score, h.path))
    return hits[:top]


def report_index(index: Index, query: str, top: int = 5) -> SearchResult:
    """Search an index and say how good the best match is (coverage, missing words, interpretations)."""
    groups = query_plan(query, index)
    interpreted = [f"{g.source} -> {g.interpreted}" for g in groups if g.interpreted]
    terms = flatten(groups)
    if not terms or top <= 0:
        return SearchResult(query, [], weak=bool(terms), interpreted=interpreted)
    hits = _rank(index, terms, top)
    if not hits:
        return SearchResult(query, [], weak=True, interpreted=interpreted,
                            note="no handbook passage contains any word of the query")
    for hit in hits:
        hit.coverage, hit.missing = _coverage(index, groups, hit.path)
        hit.coverage = round(hit.coverage, 3)
    best = hits[0]
    counted = [g for g in groups if g.counted and g.terms]
    note = ""
    if not counted:
        weak = True
        note = "weak match: no word of the query is a known term; only raw Chinese characters matched"
    else:
        weak = best.coverage < WEAK_COVERAGE
        if weak:
            found = len(counted) - len(best.missing)
            note = (f"weak match: the best page contains {found} of {len(counted)} query words "
                    f"(missing: {', '.join(best.missing)}); the handbook may not cover this — try other words")
    return SearchResult(query, hits, weak=weak, coverage=best.coverage, missing=list(best.missing),
                        interpreted=interpreted, note=note)


def search_index(index: Index, query: str, top: int = 5) -> list[FileHit]:
    return report_index(index, query, top).hits


def search_report(query: str, handbook_dir: Path | str, top: int = 5,
                  cache_path: Path | str | None = None) -> SearchResult:
    """Like `search`, with the weak-match verdict and how the query was read."""
    if not query or not query.strip():
        return SearchResult(query or "", [])
    index = build_index(handbook_dir, cache_path)
    return report_index(index, query, top)


def search(query: str, handbook_dir: Path | str, top: int = 5, cache_path: Path | str | None = None) -> list[FileHit]:
    """Ranked handbook files for `query`, each with its best matching passages (line numbers 1-based)."""
    return search_report(query, handbook_dir, top, cache_path).hits


def snippet(text: str, query_terms: Iterable[str], width: int = 220) -> str:
    flat = " ".join(text.split())
    lowered = flat.lower()
    wanted = set(query_terms)
    pos = -1
    for word in WORD.finditer(lowered):
        if norm(re.sub(r"[._\-/]", "", word.group(0))) in wanted:
            pos = word.start()
            break
    start = max(0, pos - width // 3) if pos >= 0 else 0
    if start > 0:
        space = flat.rfind(" ", 0, start)
        start = space + 1 if space >= 0 and start - space < 30 else start
    piece = flat[start : start + width]
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(flat) else "")
