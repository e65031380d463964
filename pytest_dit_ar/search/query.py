"""The handbook search's query planning: each word of a query as a group of weighted tokens, with synonyms
(`EXPANSIONS`), a correction of a word the handbook does not contain (rapidfuzz), and Chinese terms translated
with the dictionary in zh.py (segmented by jieba), unknown characters matched as bigrams."""

from __future__ import annotations

from dataclasses import dataclass

from . import zh
from .index import Index
from .words import ASCII_OR_CJK, bigrams, halfwidth, norm, tokens, word_forms

W_EXPANSION = 0.45
W_RELATED = 0.6       # words after "|" in a Chinese dictionary entry
W_CORRECTED = 0.7     # a misspelt word replaced by the closest handbook word
W_CJK_BIGRAM = 0.5    # Chinese characters the dictionary does not know, matched as bigrams

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
            _EXPANSIONS_NORM.setdefault(norm(key), []).extend(norm(v) for v in values)
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
    for match in ASCII_OR_CJK.finditer(halfwidth(query or "")):
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
        forms = word_forms(raw)
        if not forms:
            continue
        terms = {norm(f): 1.0 for f in forms}
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
            for bg in bigrams(" ".join(phrase)):
                pairs.setdefault(bg, 1.0)
            phrase = []
        else:
            phrase.append(word)
    if pairs:
        groups.append(QueryGroup("", pairs, counted=False))
    return groups


def flatten(groups: list[QueryGroup]) -> dict[str, float]:
    terms: dict[str, float] = {}
    for group in groups:
        for t, w in group.terms.items():
            terms[t] = max(terms.get(t, 0.0), w)
    return terms


def query_terms(query: str) -> dict[str, float]:
    """Token -> weight for `query` (synonyms and Chinese translation included; no typo correction, which
    needs an index)."""
    return flatten(query_plan(query))
