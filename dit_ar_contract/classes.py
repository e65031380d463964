"""The change-class vocabulary, defined once (docs/design/quality.md): each class knows its word and its rank,
mildest first.

A candidate declares a class; the audit may raise it (never lower it) to the class its evidence implies, and a
kept commit's class is inherited by the candidates after it. The quality gate of the effective class applies.
Like `Status`, every part of the harness (the config, the CLI's choices, the audit, the gates, the loop, the
ledger) reads the classes from here. A `ChangeClass` is also a `str` equal to its word, so records that store the
word (the ledger, best.json, quality.json) read back equal to the enum member.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum


class ChangeClass(str, Enum):
    EXACT = "exact"  # the same computation: outputs within the baseline's own noise envelope
    NUMERICAL = "numerical"  # the same algorithm in other arithmetic: fixed fidelity floors
    APPROXIMATE = "approximate"  # less work for a close answer (e.g. fewer steps): task non-inferiority
    QUANTIZATION = "quantization"  # low-bit weights or activations: the task scores within their tolerance

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def word(self) -> str:
        return self.value

    @property
    def rank(self) -> int:
        """0 for the mildest class; a higher rank is a stricter claim about the outputs."""
        return tuple(ChangeClass).index(self)

    def raised_to(self, other: ChangeClass | str) -> ChangeClass:
        """The stricter of the two classes."""
        other = ChangeClass.from_word(other)
        return self if self.rank >= other.rank else other

    @property
    def judged_on_the_task(self) -> bool:
        """Whether the class's claim is about the task rather than the pixels (its gate needs task metrics)."""
        return self in (ChangeClass.APPROXIMATE, ChangeClass.QUANTIZATION)

    @classmethod
    def from_word(cls, word: ChangeClass | str) -> ChangeClass:
        if isinstance(word, ChangeClass):
            return word
        for member in cls:
            if member.value == word:
                return member
        raise ValueError(f"{word!r} is not a change class; known: {', '.join(WORDS)}")


WORDS = tuple(c.value for c in ChangeClass)
MILDEST = ChangeClass.EXACT


def approximate_outputs(classes: Iterable[ChangeClass | str]) -> bool:
    """Whether the outputs may drift like an approximation's: a step cut (an approximate change) among the
    classes that shaped them, i.e. the declared class, the class the best inherited and the classes the audit
    found. The one rule both the quality gate and the timed rounds' output check apply (a quantization with no
    step cut keeps the numerical floors in both)."""
    return any(ChangeClass.from_word(c) is ChangeClass.APPROXIMATE for c in classes)
