"""Signs that a baseline's timing was taken on a busy machine.

The baseline's A/A segment runs the unmodified pipeline against itself in two fresh processes. On a quiet
machine the two agree within a few percent and the slowest rounds stay near the median; other jobs on the
cores (or a GPU shared with someone else) show up as a large A/A difference, a long tail, or a load average
above what the lane's own threads explain. None of this invalidates the verdicts (the sequential test adapts
to the noise it sees) but experiments on such a session need more segments and detect less.
"""

from __future__ import annotations

from dataclasses import dataclass

AA_LIMIT_PCT = 5.0  # |A/A| beyond this: the two identical processes did not run alike
TAIL_LIMIT = 2.0  # p95 beyond twice the median: some rounds were stalled by something else


@dataclass(frozen=True)
class MachineLoad:
    aa_pct: float
    median_ms: float
    p95_ms: float | None
    load_average: float  # one-minute load average while the baseline was taken
    cores: int
    threads: int  # threads the lane's workers use


def busy_signs(m: MachineLoad) -> list[str]:
    """The figures that say the machine was busy, in words; empty when none."""
    signs = []
    if abs(m.aa_pct) > AA_LIMIT_PCT:
        signs.append(f"A/A difference {m.aa_pct:+.1f}% between two identical processes (quiet: within "
                     f"±{AA_LIMIT_PCT:g}%)")
    if m.p95_ms is not None and m.median_ms > 0 and m.p95_ms / m.median_ms > TAIL_LIMIT:
        signs.append(f"slowest rounds (p95) {m.p95_ms / m.median_ms:.1f}x the median (quiet: under "
                     f"{TAIL_LIMIT:g}x)")
    others = m.load_average - m.threads
    if others > max(1.0, 0.5 * m.cores):
        signs.append(f"load average {m.load_average:.1f} on {m.cores} cores while the lane uses {m.threads}")
    return signs


def busy_warning(m: MachineLoad) -> str | None:
    signs = busy_signs(m)
    if not signs:
        return None
    return ("warning: the baseline's timing looks like a busy machine: " + "; ".join(signs) + ". It is stored "
            "(verdicts stay valid; they need more segments and detect less). To retake it on a quiet machine: "
            "stop other jobs, then `dit-ar init --tag NEW` and `dit-ar baseline` (a session's baseline is never "
            "replaced).")
