"""The handbook search's words: how text becomes normalised tokens (at index and at query time alike).

A word gives its joined form, its compound and camel-case parts and a number's unit; each is lower-cased,
lightly stemmed and folded to one spelling (`CANONICAL`); stop words are dropped. Runs of Chinese characters
give character bigrams (`zh.bigrams`).
"""

from __future__ import annotations

import functools
import re

from . import zh

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

WORD = re.compile(r"[A-Za-z0-9]+(?:[._\-/][A-Za-z0-9]+)*")
_CAMEL = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_NUM_UNIT = re.compile(r"^(\d+)([a-z]+)$")
ASCII_OR_CJK = re.compile(WORD.pattern + "|" + zh.CJK.pattern)
_FULLWIDTH = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}


def halfwidth(text: str) -> str:
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
def norm(token: str) -> str:
    token = CANONICAL.get(token, token)
    return CANONICAL.get(_stem(token), _stem(token))


@functools.lru_cache(maxsize=65536)
def word_forms(raw: str) -> tuple[str, ...]:
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
    for match in ASCII_OR_CJK.finditer(halfwidth(text)):
        raw = match.group(0)
        if zh.CJK.fullmatch(raw):
            out.extend(zh.bigrams(raw))
            continue
        out.extend(norm(form) for form in word_forms(raw))
    return out


def primary_tokens(text: str) -> list[str]:
    """One token per word (joined form only), for adjacent-pair indexing."""
    out = []
    for match in WORD.finditer(halfwidth(text)):
        word = re.sub(r"[._\-/]", "", match.group(0)).lower()
        if word and word not in STOPWORDS and (len(word) > 1 or word.isdigit()):
            out.append(norm(word))
    return out


def bigrams(text: str) -> list[str]:
    words = primary_tokens(text)
    return [f"{a}+{b}" for a, b in zip(words, words[1:])]
