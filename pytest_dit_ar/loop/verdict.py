"""The verdict: one pure function, `decide`, and nothing else decides.

Order (docs/design/state-and-recovery.md): scope -> crash -> quality against the original baseline -> performance
against the
current best. Each gate arrives as a `Finding` built from evidence the harness measured itself; a gate
with no finding at all fails (nothing is kept on missing evidence).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dit_ar_contract.status import Status


@dataclass(frozen=True)
class Finding:
    """One gate's outcome as the verdict sees it: passed or not, and why, in words."""

    passed: bool
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    status: Status
    reasons: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        return self.status.verdict_line

    @property
    def exit_code(self) -> int:
        return self.status.exit_code

    @property
    def reason(self) -> str:
        """The first reason: the rule that decided, in words (the ledger's `reason` column)."""
        return self.reasons[0] if self.reasons else ""


NO_QUALITY = "no quality evidence: the quality tests did not run"
NO_PERFORMANCE = "no performance evidence: the speed test did not run"


def decide(out_of_bounds: Sequence[str], crash: str | None, quality: Finding | None,
           performance: Finding | None) -> Verdict:
    """Scope, then crash, then quality, then performance; the first gate that fails decides.

    `out_of_bounds` is what the candidate changed that a candidate may not: paths outside the mutable ones in
    its commit (found before the run), and fixed files, the baseline, the state, git or the environment changed
    while it ran (found after it). Any of them is a scope discard."""
    if out_of_bounds:
        return Verdict(Status.DISCARD_SCOPE, tuple(out_of_bounds))
    if crash:
        return Verdict(Status.CRASH, (crash,))
    if quality is None:
        return Verdict(Status.DISCARD_QUALITY, (NO_QUALITY,))
    if not quality.passed:
        return Verdict(Status.DISCARD_QUALITY, quality.reasons or ("the quality gate failed",))
    if performance is None:
        return Verdict(Status.DISCARD_PERFORMANCE, (NO_PERFORMANCE,))
    if not performance.passed:
        return Verdict(Status.DISCARD_PERFORMANCE, performance.reasons or ("the performance gate failed",))
    return Verdict(Status.KEEP, performance.reasons)
