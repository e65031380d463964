"""Exceptions that map to the exit codes of `dit-ar` and of `pytest --dit-ar-experiment`."""

from __future__ import annotations

from collections.abc import Iterable

EXIT_OK = 0
EXIT_DISCARD = 1
EXIT_REFUSED = 2


class DitArError(Exception):
    """Base class of the harness's own errors."""


class Refused(DitArError):
    """The request cannot be judged; nothing in git or state was changed (exit 2). The message names what is wrong
    and, in its words or in `way_out`, what gets the user out (the faces print `way_out` on a line of its own)."""

    def __init__(self, message: str = "", way_out: str = ""):
        super().__init__(message)
        self.way_out = way_out


class ConfigError(Refused):
    """The config file is malformed: the message names the file, the key, what was found and what was expected."""

    def __init__(self, path: object, key: str, found: object, expected: str):
        self.path, self.key, self.found, self.expected = path, key, found, expected
        super().__init__(f"{path}: key '{key}': found {found!r}, expected {expected}")


class UnknownKeyError(ConfigError):
    """A key nobody reads: refused so that a typo never silently drops a setting."""

    def __init__(self, path: object, key: str, known: Iterable[str]):
        self.known = tuple(sorted(known))
        super().__init__(path, key, "an unknown key", f"one of the known keys {list(self.known)}")


class CandidateCrash(DitArError):
    """The candidate raised, ran out of memory, produced NaN/Inf or its worker died."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details
