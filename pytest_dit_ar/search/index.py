"""The handbook search's index: markdown split into passages, each passage's weighted term counts (body,
heading, file title and name, adjacent-word pairs), the document frequencies, and the cache on disk keyed by
the files' hashes."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .words import WORD, bigrams, tokens, word_forms

INDEX_VERSION = 5

# Field weights of a passage's term counts.
W_BODY = 1.0
W_HEADING = 2.5
W_TITLE = 1.5
W_BIGRAM = 0.6
# Example command lines (a `dit-ar ...` line in a code block) and above all the query quoted in an example
# `dit-ar search "..."` show how to ask, not what a page is about: their words count this much.
W_COMMAND = 0.3
W_EXAMPLE_QUERY = 0.05


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
            for match in WORD.finditer(text):
                for form in word_forms(match.group(0)):
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
            for token in tokens(part) + bigrams(part):
                body_toks[token] += weight
        head_toks = Counter(tokens(heading))
        head_toks.update(bigrams(heading))
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


# Indexes built or loaded in this process, keyed by their files' hashes (what an index is made of: each passage
# comes from a file's path and text), with their JSON. A second project indexing the same handbook (every `init`
# of a fresh state folder) takes it from here; an Index is never changed after it is made.
_BUILT: dict[tuple[tuple[str, str], ...], tuple[Index, str]] = {}
_BUILT_MAX = 4
_BUILT_LOCK = threading.Lock()


def _remember(key: tuple[tuple[str, str], ...], index: Index, text: str) -> None:
    with _BUILT_LOCK:
        _BUILT.pop(key, None)
        _BUILT[key] = (index, text)
        while len(_BUILT) > _BUILT_MAX:
            del _BUILT[next(iter(_BUILT))]


def _write_cache(cache_path: Path, text: str) -> None:
    """Write the index's JSON to `cache_path` atomically, unless the file holds exactly that already."""
    try:
        if cache_path.read_text(encoding="utf-8") == text:
            return
    except (OSError, ValueError):
        pass
    try:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_path.with_name(f".{cache_path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, cache_path)
    except OSError:
        pass


def build_index(handbook_dir: Path | str, cache_path: Path | str | None = None) -> Index:
    """Index every markdown file under `handbook_dir`. With `cache_path`, reuse a cached index whose file
    hashes all match, and write a fresh one (atomically) when they do not. An index of the same files built or
    loaded earlier in this process is reused (and written to `cache_path` when that file lacks it)."""
    handbook_dir = Path(handbook_dir)
    contents: dict[str, bytes] = {}
    for path in _markdown_files(handbook_dir):
        contents[path.relative_to(handbook_dir).as_posix()] = path.read_bytes()
    hashes = {rel: _hash(data) for rel, data in contents.items()}
    key = tuple(hashes.items())
    known = _BUILT.get(key)
    if known is not None:
        index, text = known
        if cache_path is not None:
            _write_cache(Path(cache_path), text)
        return index
    if cache_path is not None:
        cache_path = Path(cache_path)
        try:
            text = cache_path.read_text(encoding="utf-8")
            data = json.loads(text)
            if data.get("version") == INDEX_VERSION and data.get("files") == hashes:
                index = Index.from_json(data)
                _remember(key, index, text)
                return index
        except (OSError, ValueError, KeyError, TypeError):
            pass
    docs: list[_Doc] = []
    for rel, data in contents.items():
        docs.extend(_docs_for_file(rel, data.decode("utf-8", errors="replace")))
    index = Index(docs, hashes)
    text = json.dumps(index.to_json())
    _remember(key, index, text)
    if cache_path is not None:
        _write_cache(Path(cache_path), text)
    return index
