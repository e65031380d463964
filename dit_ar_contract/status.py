"""The status vocabulary, defined once: each status knows its ledger word, its `VERDICT:` line, its exit
code and its colour in the report. The ledger, the verdict, `dit-ar status` and the report all read it."""

from __future__ import annotations

from enum import Enum

from .errors import EXIT_DISCARD, EXIT_OK


class Status(Enum):
    BASELINE = ("baseline", "", EXIT_OK, "#1f4e9c")
    KEEP = ("keep", "KEEP", EXIT_OK, "#2e8b3d")
    DISCARD_QUALITY = ("discard-quality", "DISCARD-QUALITY", EXIT_DISCARD, "#d98c00")
    DISCARD_PERFORMANCE = ("discard-performance", "DISCARD-PERFORMANCE", EXIT_DISCARD, "#7d5bbf")
    DISCARD_SCOPE = ("discard-scope", "DISCARD-SCOPE", EXIT_DISCARD, "#c0392b")
    CRASH = ("crash", "CRASH", EXIT_DISCARD, "#555555")
    # `dit-ar revalidate`: the best against the original baseline in fresh workers; a row of its own kind that
    # never moves the best (loop/revalidate.py)
    REVALIDATE = ("revalidate", "REVALIDATED", EXIT_OK, "#0a7d8c")

    def __init__(self, word: str, verdict_word: str, exit_code: int, colour: str):
        self.word = word
        self.verdict_word = verdict_word
        self.exit_code = exit_code
        self.colour = colour

    @property
    def verdict_line(self) -> str:
        """The last line `experiment` prints, e.g. `VERDICT: KEEP`."""
        return f"VERDICT: {self.verdict_word}"

    @property
    def is_failure(self) -> bool:
        """A discard or a crash (what `dit-ar status` lists as recent failures)."""
        return self.exit_code == EXIT_DISCARD

    @property
    def is_experiment(self) -> bool:
        """The verdict of one candidate commit (not a baseline, not a re-validation)."""
        return self not in (Status.BASELINE, Status.REVALIDATE)

    @classmethod
    def from_word(cls, word: str) -> Status:
        for status in cls:
            if status.word == word:
                return status
        raise ValueError(f"{word!r} is not a status word; known: {[s.word for s in cls]}")


WORDS = tuple(s.word for s in Status)
