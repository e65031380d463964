"""Where one experiment's wall time went, by phase: one schema for experiment.json's `phases`, `dit-ar experiment
--time` and `dit-ar summary --time`.

The harness's phase clock (loop/candidate.py's PhaseClock, the timing's own seconds) records finer names; this
module folds them into the phases a reader compares between runs: start-up (worker starts and builds, fork
servers), the quality corpus, the quality judging (metrics and gates), warm-up, the timed rounds, the round checks
(the harness reading and comparing timed outputs), close (teardown), the harness's own guards (the checks before
the run, the fingerprints and checks after it, and the best's side-blind A/A when a run calls for one) and the rest
(pytest, imports, git). The phases sum to the total.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

# the clock's names per phase; what no name covers (pytest, imports, git outside the guards) is `other`
CLOCK_NAMES: dict[str, tuple[str, ...]] = {
    "start_up": ("first_worker", "warm_servers_adopt", "quality_worker_start", "best_worker_start_not_overlapped",
                 "timing_startup", "timing_fork_servers_wait", "next_servers_wait"),
    "quality_corpus": ("quality_corpus",),
    "quality_judging": ("quality_metrics", "timed_quality"),  # the timed outputs scored too (loop/quality/timed.py)
    "warm_up": ("timing_warmup",),
    "timed": ("timing_timed",),
    "round_checks": ("timing_round_checks",),
    "close": ("timing_teardown", "timing_fork_servers_close"),
    "harness": ("harness_before", "harness_after", "role_check"),  # plugin/session.py's clock around the guards
}


@dataclass(frozen=True)
class PhaseTimes:
    """Seconds per phase, the total, and what the run reused or counted on the way."""

    start_up: float = 0.0
    quality_corpus: float = 0.0
    quality_judging: float = 0.0
    warm_up: float = 0.0
    timed: float = 0.0
    round_checks: float = 0.0
    close: float = 0.0
    harness: float = 0.0  # the guards before and after the run, the best's side-blind A/A when one ran
    other: float = 0.0  # pytest, imports, git outside the guards: the total less the phases above
    total: float = 0.0
    warmup_rounds: int = 0  # warm-up generates run, both sides, all pairs
    warmup_reused: int = 0  # the quality run's generates the candidate's first warm-up counted instead
    judging_reused: bool = False  # the quality judging was the best's (stored outputs, bit-identical)

    PHASES = ("start_up", "quality_corpus", "quality_judging", "warm_up", "timed", "round_checks", "close", "harness",
              "other")

    @classmethod
    def from_clock(cls, seconds: Mapping[str, float], total: float, warmup_rounds: int = 0, warmup_reused: int = 0,
                   judging_reused: bool = False) -> PhaseTimes:
        """Fold the clock's names into the phases; `other` is what the clock did not see of `total`."""
        phase = {p: sum(float(seconds.get(n, 0.0)) for n in names) for p, names in CLOCK_NAMES.items()}
        return cls(**phase, other=max(0.0, total - sum(phase.values())), total=total, warmup_rounds=warmup_rounds,
                   warmup_reused=warmup_reused, judging_reused=judging_reused)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PhaseTimes | None:
        """The record's `phases`; None when absent (a run recorded before the phase record) or malformed."""
        if not isinstance(data, Mapping):
            return None
        kinds = {f.name: f.type for f in fields(cls)}
        try:
            values = {k: (bool(v) if kinds[k] == "bool" else int(v) if kinds[k] == "int" else float(v))
                      for k, v in data.items() if k in kinds}
        except (TypeError, ValueError):
            return None
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def seconds(self) -> dict[str, float]:
        """The phases in order, seconds each (they sum to `total`)."""
        return {p: getattr(self, p) for p in self.PHASES}

    def line(self) -> str:
        """One line: each phase's seconds, the total, the warm-up count and what was reused."""
        parts = ", ".join(f"{p.replace('_', ' ')} {s:.1f}" for p, s in self.seconds().items())
        reused = [f"{self.warmup_reused} quality generates as warm-up"] if self.warmup_reused else []
        reused += ["the best's quality judging"] if self.judging_reused else []
        tail = f"; reused {', '.join(reused)}" if reused else ""
        return f"{self.total:.1f} s: {parts}; {self.warmup_rounds} warm-up rounds{tail}"
