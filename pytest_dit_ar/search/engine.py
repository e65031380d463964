"""BM25 retrieval over the handbook (standard library only); the `dit-ar search` verb is cli/search.py.

The handbook is split into passages (one per paragraph, list, table or code block), each carrying the
heading it sits under and the file's title. A passage is scored with a BM25F-style formula: term
frequencies from the passage body, its heading (weighted more) and the file title plus file name
(weighted more still) are combined before the usual BM25 saturation. Adjacent-word pairs are indexed
too, so "cuda graphs" prefers passages where those words stand together. A file's score is its best
passage plus a smaller share of its next two, so one long file cannot win on volume alone.

API:
    search(query, handbook_dir, top=5) -> list[FileHit]
    build_index(handbook_dir, cache_path=None) -> Index      # cached by file hashes when cache_path given
    snippet(text, terms) -> str                              # a passage cut around its first matching word
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

INDEX_VERSION = 3

# BM25 parameters and field weights.
K1 = 1.2
B = 0.6
W_BODY = 1.0
W_HEADING = 2.5
W_TITLE = 1.5
W_BIGRAM = 0.6
W_EXPANSION = 0.45
SECOND_PASSAGE_SHARE = 0.25
# Index pages list every topic; they should not outrank the page they point to.
FILE_WEIGHTS = {"README.md": 0.5}
# Reference lists (a page's "Sources" section) repeat keywords from everywhere; they count less.
HEADING_WEIGHTS = {"sources": 0.6, "source": 0.6, "references": 0.6}
MAX_PASSAGES_PER_FILE = 3

STOPWORDS = frozenset(
    """a an and are as at be been but by can could do does did for from had has have how i if in into is it
    its just me more most my no not of on or our over should so some such than that the their them then there
    these they this those to too up us use used using via was we were what when where which while who why will
    with would you your yes about any each also only own same very does doing here out off again all both few
    after before other being because until against between through during above below once further""".split()
)

# Spelling variants folded into one token at index and query time.
CANONICAL = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "float8": "fp8",
    "e4m3": "fp8",
    "e4m3fn": "fp8",
    "float32": "fp32",
    "tensorfloat32": "tf32",
    "sm86": "sm86",
    "sm_86": "sm86",
    "cudagraph": "cudagraph",
    "cudagraphs": "cudagraph",
    "gigabyte": "gb",
    "gigabytes": "gb",
    "gib": "gb",
    "nsys": "nsys",
    "flashattn": "flashattention",
    "fa2": "flashattention2",
    "fa3": "flashattention3",
    "fa4": "flashattention4",
    "w8a8": "int8",
    "w8a16": "int8",
}

# Query-side expansions: a query word also looks, at lower weight, for these stems.
EXPANSIONS = {
    "vram": ["memory"],
    "memory": ["vram"],
    "oom": ["memory", "vram"],
    "flash": ["flashattention"],
    "flashattention": ["flash"],
    "graph": ["cudagraph"],
    "cudagraph": ["graph"],
    "speedup": ["faster"],
    "faster": ["speedup"],
    "slow": ["latency"],
    "nvlink": ["bridge"],
    "nsight": ["nsys", "ncu"],
    "nsys": ["nsight"],
    "ncu": ["nsight"],
    "quant": ["quantiz"],
    "int8": ["quantiz"],
    "fp8": ["quantiz"],
    "cfg": ["guidanc"],
    "cond": ["conditional"],
    "uncond": ["unconditional"],
    "precompute": ["hoist"],
    "hoist": ["precompute"],
    "guidanc": ["cfg"],
    "t5": ["encod"],
    "offload": ["cpu"],
    "noise": ["variance"],
    "keep": ["verdict"],
    "discard": ["verdict"],
    "crash": ["verdict"],
}

_WORD = re.compile(r"[A-Za-z0-9]+(?:[._\-/][A-Za-z0-9]+)*")
_CAMEL = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_NUM_UNIT = re.compile(r"^(\d+)([a-z]+)$")


def _stem(word: str) -> str:
    """Light suffix stripping: enough that cache/caches/caching/cached meet, no more."""
    w = word
    if len(w) <= 3 or w[-1].isdigit():
        return w
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    for suffix in ("ations", "ation", "ings", "ing", "edly", "ed"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            if suffix == "ed" and w.endswith("eed"):
                break
            w = w[: -len(suffix)]
            break
    if w.endswith("e") and len(w) > 4:
        w = w[:-1]
    if len(w) > 4 and w[-1] == w[-2] and w[-1] not in "lsz0123456789":
        w = w[:-1]  # running -> runn -> run
    return w


def _norm(token: str) -> str:
    token = CANONICAL.get(token, token)
    return CANONICAL.get(_stem(token), _stem(token))


def tokens(text: str) -> list[str]:
    """Words of `text`, normalised. Compound words also give their joined form and their parts."""
    out: list[str] = []
    for match in _WORD.finditer(text):
        raw = match.group(0)
        pieces = re.split(r"[._\-/]", raw)
        forms: list[str] = []
        joined = "".join(pieces).lower()
        forms.append(joined)
        if len(pieces) > 1:
            forms.extend(p.lower() for p in pieces if p)
        for piece in pieces:
            camel = _CAMEL.findall(piece)
            alpha = [c for c in camel if not c.isdigit()]
            if len(alpha) > 1 and all(len(c) >= 3 for c in alpha):
                forms.extend(c.lower() for c in camel if not c.isdigit())
        unit = _NUM_UNIT.match(joined)
        if unit:
            forms.extend(unit.groups())
        for form in forms:
            if not form or form in STOPWORDS:
                continue
            if len(form) == 1 and not form.isdigit():
                continue
            out.append(_norm(form))
    return out


def _primary_tokens(text: str) -> list[str]:
    """One token per word (joined form only), for adjacent-pair indexing."""
    out = []
    for match in _WORD.finditer(text):
        word = re.sub(r"[._\-/]", "", match.group(0)).lower()
        if word and word not in STOPWORDS and (len(word) > 1 or word.isdigit()):
            out.append(_norm(word))
    return out


def _bigrams(text: str) -> list[str]:
    words = _primary_tokens(text)
    return [f"{a}+{b}" for a, b in zip(words, words[1:])]


# --------------------------------------------------------------------------------------------------
# Markdown splitting


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


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def split_markdown(text: str) -> tuple[str, list[tuple[int, str, str]]]:
    """Return (title, [(line, heading, passage_text), ...]); lines are 1-based."""
    title = ""
    heading = ""
    passages: list[tuple[int, str, str]] = []
    block: list[str] = []
    block_line = 0
    in_fence = False
    fence = ""

    def flush() -> None:
        nonlocal block
        body = "\n".join(block).strip()
        if body:
            passages.append((block_line, heading, body))
        block = []

    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if in_fence:
            block.append(line)
            if stripped.startswith(fence):
                in_fence = False
                flush()
            continue
        if stripped.startswith(("```", "~~~")):
            flush()
            in_fence, fence = True, stripped[:3]
            block, block_line = [line], number
            continue
        match = _HEADING.match(line)
        if match:
            flush()
            heading = match.group(2).strip()
            if match.group(1) == "#" and not title:
                title = heading
            continue
        if not stripped:
            flush()
            continue
        if not block:
            block_line = number
        block.append(line)
    flush()
    return title, passages


# --------------------------------------------------------------------------------------------------
# Index


@dataclass
class _Doc:
    path: str
    title: str
    line: int
    heading: str
    text: str
    tf: dict[str, float]
    length: float


class Index:
    def __init__(self, docs: list[_Doc], files: dict[str, str]):
        self.docs = docs
        self.files = files  # path -> sha256
        self.n = len(docs)
        self.avg_len = (sum(d.length for d in docs) / self.n) if self.n else 1.0
        df: Counter[str] = Counter()
        for d in docs:
            df.update(d.tf.keys())
        self.idf = {t: math.log(1.0 + (self.n - c + 0.5) / (c + 0.5)) for t, c in df.items()}
        self.postings: dict[str, list[int]] = {}
        for i, d in enumerate(docs):
            for t in d.tf:
                self.postings.setdefault(t, []).append(i)

    # ----- persistence
    def to_json(self) -> dict:
        return {
            "version": INDEX_VERSION,
            "files": self.files,
            "docs": [[d.path, d.title, d.line, d.heading, d.text, d.tf, d.length] for d in self.docs],
        }

    @classmethod
    def from_json(cls, data: dict) -> "Index":
        docs = [_Doc(p, t, ln, h, x, tf, length) for p, t, ln, h, x, tf, length in data["docs"]]
        return cls(docs, dict(data["files"]))


def _file_title_tokens(rel: str, title: str) -> list[str]:
    stem = Path(rel).stem
    stem = re.sub(r"^\d+_", "", stem)
    folder = re.sub(r"^\d+_", "", Path(rel).parent.name)
    return tokens(title) + tokens(stem.replace("_", " ")) + tokens(folder.replace("_", " "))


def _docs_for_file(rel: str, text: str) -> list[_Doc]:
    title, parts = split_markdown(text)
    title_toks = Counter(_file_title_tokens(rel, title))
    docs = []
    for line, heading, body in parts:
        body_toks = Counter(tokens(body))
        body_toks.update(_bigrams(body))
        head_toks = Counter(tokens(heading))
        head_toks.update(_bigrams(heading))
        tf: dict[str, float] = {}
        for t, c in body_toks.items():
            w = W_BIGRAM if "+" in t else W_BODY
            tf[t] = tf.get(t, 0.0) + w * c
        for t, c in head_toks.items():
            tf[t] = tf.get(t, 0.0) + W_HEADING * c
        for t, c in title_toks.items():
            tf[t] = tf.get(t, 0.0) + W_TITLE * min(c, 2)
        length = float(sum(c for t, c in body_toks.items() if "+" not in t)) + 4.0
        docs.append(_Doc(rel, title, line, heading, body, tf, length))
    return docs


def _markdown_files(handbook_dir: Path) -> list[Path]:
    return sorted(p for p in handbook_dir.rglob("*.md") if p.is_file())


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_index(handbook_dir: Path | str, cache_path: Path | str | None = None) -> Index:
    """Index every markdown file under `handbook_dir`. With `cache_path`, reuse a cached index whose file
    hashes all match, and write a fresh one (atomically) when they do not."""
    handbook_dir = Path(handbook_dir)
    contents: dict[str, bytes] = {}
    for path in _markdown_files(handbook_dir):
        contents[path.relative_to(handbook_dir).as_posix()] = path.read_bytes()
    hashes = {rel: _hash(data) for rel, data in contents.items()}
    if cache_path is not None:
        cache_path = Path(cache_path)
        try:
            data = json.loads(cache_path.read_text(encoding="utf-8"))
            if data.get("version") == INDEX_VERSION and data.get("files") == hashes:
                return Index.from_json(data)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    docs: list[_Doc] = []
    for rel, data in contents.items():
        docs.extend(_docs_for_file(rel, data.decode("utf-8", errors="replace")))
    index = Index(docs, hashes)
    if cache_path is not None:
        try:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_path.with_name(f".{cache_path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(index.to_json()), encoding="utf-8")
            os.replace(tmp, cache_path)
        except OSError:
            pass
    return index


# --------------------------------------------------------------------------------------------------
# Query


_EXPANSIONS_NORM: dict[str, list[str]] = {}


def _expansions() -> dict[str, list[str]]:
    if not _EXPANSIONS_NORM:
        for key, values in EXPANSIONS.items():
            _EXPANSIONS_NORM.setdefault(_norm(key), []).extend(_norm(v) for v in values)
    return _EXPANSIONS_NORM


def query_terms(query: str) -> dict[str, float]:
    terms: dict[str, float] = {}
    for t in tokens(query):
        terms[t] = 1.0
    for t in list(terms):
        for extra in _expansions().get(t, []):
            terms.setdefault(extra, W_EXPANSION)
    for bg in _bigrams(query):
        terms.setdefault(bg, 1.0)
    return terms


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


def search_index(index: Index, query: str, top: int = 5) -> list[FileHit]:
    terms = query_terms(query)
    if not terms or top <= 0:
        return []
    scores = _bm25(index, terms)
    if not scores:
        return []
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


def search(query: str, handbook_dir: Path | str, top: int = 5, cache_path: Path | str | None = None) -> list[FileHit]:
    """Ranked handbook files for `query`, each with its best matching passages (line numbers 1-based)."""
    if not query or not query.strip():
        return []
    index = build_index(handbook_dir, cache_path)
    return search_index(index, query, top)


def snippet(text: str, query_terms: Iterable[str], width: int = 220) -> str:
    flat = " ".join(text.split())
    lowered = flat.lower()
    pos = -1
    for word in _WORD.finditer(lowered):
        if _norm(re.sub(r"[._\-/]", "", word.group(0))) in query_terms:
            pos = word.start()
            break
    start = max(0, pos - width // 3) if pos >= 0 else 0
    if start > 0:
        space = flat.rfind(" ", 0, start)
        start = space + 1 if space >= 0 and start - space < 30 else start
    piece = flat[start : start + width]
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(flat) else "")
