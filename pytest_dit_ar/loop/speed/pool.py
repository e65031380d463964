"""How many worker pairs may be alive at once: from the measured memory of each side and the device's budget.

A pair's two workers are alive together (one frozen while the other is timed), and pairs started ahead
hold their memory while frozen, so the pool is the number of whole pairs whose peaks fit the budget with a
margin. Zero means not even one pair fits; the caller keeps one pair (the guardrail judges the memory).
Figures on the 24 GB A5500 target, from the H200 measurements: DiT-XL/2 eager
workers peak at 5.1-5.6 GB, so two pairs fit (4 x 5.6 = 22.4 GB of 24 x 0.95); a PixArt-Sigma-1024 worker
(7.9 GB transformer peak plus its T5-XXL text encoder) fits once, so no second pair.
"""

from __future__ import annotations

from dataclasses import dataclass

MARGIN = 0.95  # of the budget: the allocator's fragmentation and the driver's own use


@dataclass(frozen=True)
class PoolPlan:
    """Pairs that may be alive at once, and why."""

    pairs: int
    workers_that_fit: int
    per_pair_mb: float | None
    budget_mb: float | None

    def as_dict(self) -> dict[str, float | int | None]:
        return {"pairs": self.pairs, "workers_that_fit": self.workers_that_fit, "per_pair_mb": self.per_pair_mb,
                "budget_mb": self.budget_mb}


def pairs_that_fit(cand_mb: float | None, best_mb: float | None, budget_mb: float | None, max_pairs: int) -> PoolPlan:
    """At most `max_pairs` pairs whose summed peaks stay within MARGIN of `budget_mb`; with an unknown
    memory or no budget, one pair (nothing is assumed to fit that was not measured)."""
    if max_pairs < 1:
        raise ValueError("max_pairs must be at least 1")
    if not cand_mb or not best_mb or not budget_mb:
        return PoolPlan(1, 2, None, budget_mb)
    usable = budget_mb * MARGIN
    per_pair = cand_mb + best_mb
    workers = int(usable // max(cand_mb, best_mb))
    pairs = int(usable // per_pair)
    return PoolPlan(max(0, min(pairs, max_pairs)), workers, per_pair, budget_mb)
