"""A candidate's change as code, not as text: its diff against the best with comments and layout stripped, digested.

Two candidates with the same normal digest on the same best are near-duplicates: one re-rolls the other with a
comment, a blank line or a re-indented block. Per changed file (git's diff of the two commits):

- Python (`.py`): the token stream (`tokenize`) without COMMENT, NL and ENCODING tokens and without the text of
  INDENT, DEDENT and NEWLINE (only that they are there), so comments, blank lines, trailing spaces, line breaks
  inside brackets and the width of indentation do not count. Strings count, docstrings included: a program can read
  its own docstrings (`__doc__`), so a changed docstring is a changed program. A file that does not tokenize
  falls back to the rule for other text.
- Other text: its whitespace-separated words (layout does not count; comments do, whatever their syntax).
- Binary files: their bytes.
"""

from __future__ import annotations

import hashlib
import io
import tokenize

import git

DROPPED = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING}
MARKERS = {tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE, tokenize.ENDMARKER}


def python_tokens(text: str) -> str | None:
    """The code of a Python file without comments and layout (None when it does not tokenize)."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in DROPPED:
                continue
            out.append(tokenize.tok_name[tok.type] if tok.type in MARKERS else f"{tok.type}:{tok.string}")
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return "\x00".join(out)


def normal_text(path: str, data: bytes) -> bytes:
    """A file's content as far as near-duplicates go (the module's rules)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return b"binary\x00" + data
    if path.endswith(".py"):
        tokens = python_tokens(text)
        if tokens is not None:
            return b"python\x00" + tokens.encode()
    return b"text\x00" + " ".join(text.split()).encode()


def _blob(commit: git.Commit, path: str) -> bytes | None:
    try:
        return commit.tree[path].data_stream.read()
    except KeyError:
        return None


def normal_diff(repo: git.Repo, best: str, candidate: str) -> str:
    """sha256 of the candidate's diff against the best with comments and layout stripped: each changed path whose
    normal content differs, with both sides' normal content. A change of comments and layout only digests to the
    same value as no change at all."""
    ours, theirs = repo.commit(best), repo.commit(candidate)
    h = hashlib.sha256()
    for path in sorted(p for p in repo.git.diff("--no-renames", "--name-only", best, candidate).splitlines() if p):
        before, after = _blob(ours, path), _blob(theirs, path)
        a = normal_text(path, before) if before is not None else b"absent"
        b = normal_text(path, after) if after is not None else b"absent"
        if a != b:
            h.update(path.encode() + b"\x01" + hashlib.sha256(a).digest() + hashlib.sha256(b).digest())
    return h.hexdigest()
