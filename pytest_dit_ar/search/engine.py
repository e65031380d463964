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
bigrams. The ranking itself stays this module's: no BM25 library scores fractional, per-field term counts
with the project's passage length (docs/design-notes.md note 46). rapidfuzz and jieba are imported only
when a query needs them. Every result says how
much of the query the best page covers (`SearchResult.coverage`); below `WEAK_COVERAGE` the match is
reported as weak.

API:
    search(query, handbook_dir, top=5, cache_path=None) -> list[FileHit]
    search_report(query, handbook_dir, top=5, cache_path=None) -> SearchResult   # hits + weak flag + notes
    build_index(handbook_dir, cache_path=None) -> Index      # cached by file hashes when cache_path given
    search_index(index, query, top=5) -> list[FileHit];  report_index(index, query, top=5) -> SearchResult
    query_terms(query) -> dict[str, float];  query_plan(query, index=None) -> list[QueryGroup]
    snippet(text, terms) -> str                              # a passage cut around its first matching word
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from . import zh

INDEX_VERSION = 5

# BM25 parameters and field weights.
K1 = 1.2
B = 0.6
W_BODY = 1.0
W_HEADING = 2.5
W_TITLE = 1.5
W_BIGRAM = 0.6
W_EXPANSION = 0.45
W_RELATED = 0.6       # words after "|" in a Chinese dictionary entry
W_CORRECTED = 0.7     # a misspelt word replaced by the closest handbook word
W_CJK_BIGRAM = 0.5    # Chinese characters the dictionary does not know, matched as bigrams
SECOND_PASSAGE_SHARE = 0.25
# Index pages list every topic; they should not outrank the page they point to. The glossary repeats
# every term (in English and Chinese) and counts less for the same reason.
FILE_WEIGHTS = {"README.md": 0.5, "04_glossary.md": 0.6, "03_sources.md": 0.5}
# The bibliography (09_reference/03_sources.md) names every technique next to its paper; it is where to
# look up a citation, not an answer, so it counts half, like the index page.
# Example command lines (a `dit-ar ...` line in a code block) and above all the query quoted in an example
# `dit-ar search "..."` show how to ask, not what a page is about: their words count this much.
W_COMMAND = 0.3
W_EXAMPLE_QUERY = 0.05
# Reference lists (a page's "Sources" section) repeat keywords from everywhere; they count less.
HEADING_WEIGHTS = {"sources": 0.6, "source": 0.6, "references": 0.6}
MAX_PASSAGES_PER_FILE = 3
# Below this share of the query's weight (idf) found in the best page, a match is reported as weak.
WEAK_COVERAGE = 0.6

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
    "8bit": "int8",
    "4bit": "int4",
    "uint8": "int8",
    "microbenchmark": "microbenchmark",
    "microbenchmarks": "microbenchmark",
    "fastest": "faster",
    "quickest": "faster",
    "slowest": "slower",
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
    "quantize": ["quantiz"],
    "int8": ["quantiz"],
    "int4": ["quantiz"],
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
    "flush": ["clear"],
    "clear": ["flush"],
    "warmup": ["cold"],
    "cold": ["warmup"],
    "dependency": ["installed", "import"],
    "install": ["import"],
    "library": ["installed"],
    "merge": ["merging"],
    "reuse": ["cache"],
    "skip": ["cache"],
    "glossary": ["term"],
    "stop": ["budget"],
}

_WORD = re.compile(r"[A-Za-z0-9]+(?:[._\-/][A-Za-z0-9]+)*")
_CAMEL = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_NUM_UNIT = re.compile(r"^(\d+)([a-z]+)$")
_ASCII_OR_CJK = re.compile(_WORD.pattern + "|" + zh.CJK.pattern)
_FULLWIDTH = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}


def _halfwidth(text: str) -> str:
    """Full-width ASCII (as typed with a Chinese input method) to ASCII; nothing else changes."""
    return text.translate(_FULLWIDTH)


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


@functools.lru_cache(maxsize=65536)
def _norm(token: str) -> str:
    token = CANONICAL.get(token, token)
    return CANONICAL.get(_stem(token), _stem(token))


@functools.lru_cache(maxsize=65536)
def _word_forms(raw: str) -> tuple[str, ...]:
    """Lower-case surface forms of one word: joined form, compound parts, camel-case parts, number+unit."""
    pieces = re.split(r"[._\-/]", raw)
    joined = "".join(pieces).lower()
    forms = [joined]
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
    return tuple(f for f in forms if f and f not in STOPWORDS and (len(f) > 1 or f.isdigit()))


def tokens(text: str) -> list[str]:
    """Words of `text`, normalised. Compound words also give their joined form and their parts; runs of
    Chinese characters give character bigrams."""
    out: list[str] = []
    for match in _ASCII_OR_CJK.finditer(_halfwidth(text)):
        raw = match.group(0)
        if zh.CJK.fullmatch(raw):
            out.extend(zh.bigrams(raw))
            continue
        out.extend(_norm(form) for form in _word_forms(raw))
    return out


def _primary_tokens(text: str) -> list[str]:
    """One token per word (joined form only), for adjacent-pair indexing."""
    out = []
    for match in _WORD.finditer(_halfwidth(text)):
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
    coverage: float = 1.0                                  # share of the query's weight found in this file
    missing: list[str] = field(default_factory=list)       # query words this file does not contain


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
    def __init__(self, docs: list[_Doc], files: dict[str, str], vocab: dict[str, int] | None = None):
        self.docs = docs
        self.files = files  # path -> sha256
        self.vocab = vocab if vocab is not None else _surface_vocab(docs)  # surface word -> count
        self.n = len(docs)
        self.avg_len = (sum(d.length for d in docs) / self.n) if self.n else 1.0
        df: Counter[str] = Counter()
        for d in docs:
            df.update(d.tf.keys())
        self.idf = {t: math.log(1.0 + (self.n - c + 0.5) / (c + 0.5)) for t, c in df.items()}
        self.max_idf = max(self.idf.values(), default=1.0)
        self.postings: dict[str, list[int]] = {}
        for i, d in enumerate(docs):
            for t in d.tf:
                self.postings.setdefault(t, []).append(i)
        self._file_terms: dict[str, set[str]] = {}
        self._words: list[str] | None = None

    # ----- persistence
    def to_json(self) -> dict:
        return {
            "version": INDEX_VERSION,
            "files": self.files,
            "vocab": self.vocab,
            "docs": [[d.path, d.title, d.line, d.heading, d.text, d.tf, d.length] for d in self.docs],
        }

    @classmethod
    def from_json(cls, data: dict) -> "Index":
        docs = [_Doc(p, t, ln, h, x, tf, length) for p, t, ln, h, x, tf, length in data["docs"]]
        return cls(docs, dict(data["files"]), dict(data["vocab"]))

    # ----- helpers for query planning and reporting
    def knows(self, token: str) -> bool:
        return token in self.idf

    def words(self) -> list[str]:
        """The surface words, as a list (what rapidfuzz's `process.extract` searches for a correction)."""
        if self._words is None:
            self._words = list(self.vocab)
        return self._words

    def file_terms(self, path: str) -> set[str]:
        """Every token indexed for one file (all its passages, title and file name included)."""
        if path not in self._file_terms:
            terms: set[str] = set()
            for d in self.docs:
                if d.path == path:
                    terms.update(d.tf)
            self._file_terms[path] = terms
        return self._file_terms[path]


def _surface_vocab(docs: list[_Doc]) -> dict[str, int]:
    """Lower-case surface words of the handbook (letters only, at least 3 long), for typo correction."""
    vocab: Counter[str] = Counter()
    seen_titles: set[str] = set()
    for d in docs:
        texts = [d.text, d.heading]
        if d.path not in seen_titles:
            seen_titles.add(d.path)
            texts += [d.title, Path(d.path).stem.replace("_", " ")]
        for text in texts:
            for match in _WORD.finditer(text):
                for form in _word_forms(match.group(0)):
                    if len(form) >= 3 and form.isalpha():
                        vocab[form] += 1
    return dict(vocab)


def _file_title_tokens(rel: str, title: str) -> list[str]:
    stem = Path(rel).stem
    stem = re.sub(r"^\d+_", "", stem)
    folder = re.sub(r"^\d+_", "", Path(rel).parent.name)
    return tokens(title) + tokens(stem.replace("_", " ")) + tokens(folder.replace("_", " "))


_COMMAND_LINE = re.compile(r"^\s*(?:\$\s+)?dit-ar\s.*$", re.M)
_EXAMPLE_QUERY = re.compile(r"""(dit-ar\s+(?:--config\s+\S+\s+)?search\s+)("[^"\n]*"|'[^'\n]*')""")


def weighted_parts(body: str) -> list[tuple[str, float]]:
    """A passage's text in parts with their weight: quoted example queries of `dit-ar search`, the rest of
    `dit-ar` command lines in code blocks, and everything else at full weight."""
    parts: list[tuple[str, float]] = []
    rest: list[str] = []
    fenced = body.lstrip().startswith(("```", "~~~"))
    pos = 0
    for match in _EXAMPLE_QUERY.finditer(body):
        rest.append(body[pos:match.start(2)])
        parts.append((match.group(2), W_EXAMPLE_QUERY))
        pos = match.end(2)
    rest.append(body[pos:])
    text = "".join(rest)
    if fenced:
        commands = _COMMAND_LINE.findall(text)
        parts += [(line, W_COMMAND) for line in commands]
        text = _COMMAND_LINE.sub("", text)
    return [(text, W_BODY)] + parts


def _docs_for_file(rel: str, text: str) -> list[_Doc]:
    title, parts = split_markdown(text)
    title_toks = Counter(_file_title_tokens(rel, title))
    docs = []
    for line, heading, body in parts:
        body_toks: Counter[str] = Counter()
        for part, weight in weighted_parts(body):
            for token in tokens(part) + _bigrams(part):
                body_toks[token] += weight
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
# Query planning: synonyms, typo correction, Chinese


@dataclass
class QueryGroup:
    """One word (or Chinese term) of the query and the weighted tokens that stand for it."""

    source: str
    terms: dict[str, float]
    counted: bool = True          # counts when measuring how much of the query a page covers
    interpreted: str = ""         # what the word was read as, when that differs from how it was typed


_EXPANSIONS_NORM: dict[str, list[str]] = {}


def _expansions() -> dict[str, list[str]]:
    if not _EXPANSIONS_NORM:
        for key, values in EXPANSIONS.items():
            _EXPANSIONS_NORM.setdefault(_norm(key), []).extend(_norm(v) for v in values)
    return _EXPANSIONS_NORM


def correct(word: str, index: Index) -> str | None:
    """The handbook word closest to an unknown `word` (1 edit up to 7 letters, 2 from 8; an edit inserts,
    deletes or substitutes a letter or swaps two neighbours: rapidfuzz's optimal-string-alignment distance),
    or a split into two handbook words, or None. Ties go to the more frequent word."""
    if len(word) < 4 or not word.isalpha():
        return None
    from rapidfuzz import process
    from rapidfuzz.distance import OSA

    limit = 1 if len(word) < 8 else 2
    close = process.extract(word, index.words(), scorer=OSA.distance, score_cutoff=limit, limit=None)
    if close:
        return min((dist, -index.vocab.get(cand, 0), cand) for cand, dist, _ in close)[2]
    for cut in range(3, len(word) - 2):
        left, right = word[:cut], word[cut:]
        if left in index.vocab and right in index.vocab:
            return f"{left} {right}"
    return None


def query_plan(query: str, index: Index | None = None) -> list[QueryGroup]:
    """The query as groups of weighted tokens: one group per English word (with synonyms, and with a
    correction when `index` is given and does not know the word), one per recognised Chinese term, one
    per stretch of unknown Chinese characters (as bigrams, not counted for coverage), and a last group
    with the adjacent-word pairs."""
    groups: list[QueryGroup] = []
    sequence: list[str | None] = []          # English words in query order; None breaks a phrase
    for match in _ASCII_OR_CJK.finditer(_halfwidth(query or "")):
        raw = match.group(0)
        if zh.CJK.fullmatch(raw):
            for word, english in zh.segment(raw):
                if english is None:
                    grams = zh.bigrams(word)
                    groups.append(QueryGroup(word, {g: W_CJK_BIGRAM for g in grams}, counted=False))
                    sequence.append(None)
                    continue
                primary, related = zh.split_translation(english)
                terms = {t: 1.0 for t in tokens(primary)}
                for t in tokens(related):
                    terms.setdefault(t, W_RELATED)
                groups.append(QueryGroup(word, terms, interpreted=primary))
                sequence.extend(primary.split())
            continue
        forms = _word_forms(raw)
        if not forms:
            continue
        terms = {_norm(f): 1.0 for f in forms}
        interpreted = ""
        words_for_pairs = [raw]
        if index is not None and not any(index.knows(t) for t in terms):
            fixes = [fix for fix in (correct(f, index) for f in forms) if fix]
            if fixes:
                terms = {}
                for fix in fixes:
                    for t in tokens(fix):
                        terms.setdefault(t, W_CORRECTED)
                interpreted = fixes[0]
                words_for_pairs = fixes[0].split()
        groups.append(QueryGroup(raw, terms, interpreted=interpreted))
        sequence.extend(words_for_pairs)
    for group in groups:
        for t, w in list(group.terms.items()):
            for extra in _expansions().get(t, []):
                group.terms.setdefault(extra, W_EXPANSION * w)
    pairs: dict[str, float] = {}
    phrase: list[str] = []
    for word in sequence + [None]:
        if word is None:
            for bg in _bigrams(" ".join(phrase)):
                pairs.setdefault(bg, 1.0)
            phrase = []
        else:
            phrase.append(word)
    if pairs:
        groups.append(QueryGroup("", pairs, counted=False))
    return groups


def _flatten(groups: list[QueryGroup]) -> dict[str, float]:
    terms: dict[str, float] = {}
    for group in groups:
        for t, w in group.terms.items():
            terms[t] = max(terms.get(t, 0.0), w)
    return terms


def query_terms(query: str) -> dict[str, float]:
    """Token -> weight for `query` (synonyms and Chinese translation included; no typo correction, which
    needs an index)."""
    return _flatten(query_plan(query))


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
    terms = _flatten(groups)
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
    for word in _WORD.finditer(lowered):
        if _norm(re.sub(r"[._\-/]", "", word.group(0))) in wanted:
            pos = word.start()
            break
    start = max(0, pos - width // 3) if pos >= 0 else 0
    if start > 0:
        space = flat.rfind(" ", 0, start)
        start = space + 1 if space >= 0 and start - space < 30 else start
    piece = flat[start : start + width]
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(flat) else "")
