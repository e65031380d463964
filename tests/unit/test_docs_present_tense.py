"""The user's documents describe what is, briefly, and stay inside the repository.

Checked in README.md, program.md, SKILL.md, docs/guide/ and docs/design/ (code blocks included):

* no history: no dates (YYYY-MM-DD), commit hashes, "wave", "note N" or "issue N" (dated results belong in
  lab/notebook/, changes in CHANGELOG.md);
* no link leaves the repository: no http(s) address (cite a public source by author, title and year);
  relative links and paths resolve (tests/unit/test_links.py);
* sizes: README.md at most 150 lines and 1,500 words, program.md at most 150 lines, each guide at most 250 lines;
* every design page cites the lab/notebook/ file behind its figures, and every notebook file it names exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDES = sorted((ROOT / "docs" / "guide").glob("*.md"))
DESIGN = sorted((ROOT / "docs" / "design").glob("*.md"))
USER_DOCS = [ROOT / "README.md", ROOT / "program.md", ROOT / "SKILL.md", *GUIDES, *DESIGN]

DATE = re.compile(r"\b(19|20)\d\d-[01]\d-[0-3]\d\b")
# 7 to 40 hex digits with at least one letter and one digit, standing alone (not part of a file name or a word)
HASH = re.compile(r"(?<![\w./-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w/-]|\.\w)")
WAVE = re.compile(r"\bwaves?\b", re.I)
NOTE = re.compile(r"\bnotes? \d+", re.I)
ISSUE = re.compile(r"\bissues? #?\d+", re.I)
URL = re.compile(r"\bhttps?://|\bwww\.", re.I)
HISTORY = {"a date": DATE, "a commit hash": HASH, "'wave'": WAVE, "'note N'": NOTE, "'issue N'": ISSUE}

LIMITS = {"README.md": (150, 1500), "program.md": (150, None)}
GUIDE_LINES = 250
NOTEBOOK = re.compile(r"lab/notebook/[\w.-]+\.md")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def history_in(text: str) -> list[tuple[int, str, str]]:
    """(line, what, the match) for every trace of history in a text."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for what, pattern in HISTORY.items():
            found += [(number, what, m.group(0)) for m in pattern.finditer(line)]
    return found


def test_the_checks_catch_history_and_leave_the_present_alone():
    past = ("Measured on 2026-12-03 at commit 592c704 (wave 10, design note 47, issue 20):\n"
            "see `docs/x.md`, fixed in 3d15ab1.\n")
    kinds = sorted({what for _, what, _ in history_in(past)})
    assert kinds == sorted(HISTORY), kinds
    present = ("The bound is 2.5% (`lab/notebook/speed-verdict-simulation.md`); the weights file is\n"
               "`alexnet-owt-7be5be79.pth`; 1e-5 and 0.0001 are floors; a run id is `<run-id>`; 20261203 is a number.\n"
               "A wavelet, a footnote, the notes of the session and the issues it raised are fine.\n")
    assert history_in(present) == []
    assert URL.search("see https://example.org") and not URL.search("see `docs/guide/README.md`")


@pytest.mark.parametrize("doc", USER_DOCS, ids=rel)
def test_no_history_in_the_users_documents(doc: Path):
    found = history_in(doc.read_text(encoding="utf-8"))
    assert not found, "\n".join(f"{rel(doc)}:{n}: {what}: {m!r} (dated results go to lab/notebook/, changes to "
                                f"CHANGELOG.md)" for n, what, m in found)


@pytest.mark.parametrize("doc", USER_DOCS, ids=rel)
def test_no_link_leaves_the_repository(doc: Path):
    bad = [f"{rel(doc)}:{n}: {line.strip()[:100]}" for n, line in enumerate(doc.read_text().splitlines(), start=1)
           if URL.search(line)]
    assert not bad, "cite public sources by author, title and year instead of an address:\n" + "\n".join(bad)


def test_sizes():
    problems = []
    for name, (max_lines, max_words) in LIMITS.items():
        text = (ROOT / name).read_text(encoding="utf-8")
        lines, words = len(text.splitlines()), len(text.split())
        if lines > max_lines:
            problems.append(f"{name}: {lines} lines (at most {max_lines})")
        if max_words is not None and words > max_words:
            problems.append(f"{name}: {words} words (at most {max_words})")
    for guide in GUIDES:
        lines = len(guide.read_text(encoding="utf-8").splitlines())
        if lines > GUIDE_LINES:
            problems.append(f"{rel(guide)}: {lines} lines (at most {GUIDE_LINES})")
    assert not problems, "\n".join(problems)


def test_the_guides_and_design_pages_exist():
    """The task guides and design topics the README links to."""
    names = {p.name for p in GUIDES} | {f"design/{p.name}" for p in DESIGN}
    expected = {"your-own-model.md", "reading-a-verdict.md", "sessions-side-by-side.md", "the-nights-summary.md",
                "design/speed-verdict.md", "design/quality.md", "design/sandbox-and-security.md",
                "design/state-and-recovery.md", "design/models-and-lanes.md", "design/scale.md"}
    assert expected <= names, sorted(expected - names)


@pytest.mark.parametrize("page", [p for p in DESIGN if p.name != "README.md"], ids=rel)
def test_design_pages_cite_the_notebook_behind_their_figures(page: Path):
    text = page.read_text(encoding="utf-8")
    cited = set(NOTEBOOK.findall(text))
    assert cited, f"{rel(page)} names no lab/notebook/ file for its measured figures"
    missing = sorted(c for c in cited if not (ROOT / c).is_file())
    assert not missing, f"{rel(page)} cites {missing}, which do not exist"


FIRST_VERDICT_WORDS = 2500  # what a newcomer with a model of their own reads before the first verdict


def test_the_path_to_a_first_verdict_on_your_own_model_is_short():
    """README's introduction (up to its first section) and the own-model guide are the whole path from nothing to a
    first verdict in one's own repository; everything else is linked from them."""
    intro = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## ", 1)[0]
    guide = (ROOT / "docs" / "guide" / "your-own-model.md").read_text(encoding="utf-8")
    assert "your-own-model.md" in intro, "README's introduction no longer sends a newcomer to the guide"
    words = len(intro.split()) + len(guide.split())
    assert words <= FIRST_VERDICT_WORDS, f"the path to a first verdict is {words} words (at most {FIRST_VERDICT_WORDS})"
    for step in ("pip install", "dit-ar scaffold", "dit-ar init", "dit-ar baseline", "dit-ar experiment", "way out:"):
        assert step in guide, f"the own-model guide lost {step!r}"
