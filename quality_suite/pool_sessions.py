"""Simulated sessions over a pool of per-case scores, judged by the gate's own loop (`task_tests.run`, hence
`task_tests.judge_case_scores`): how `dit-ar calibrate --quality` measures the task-score tests' error rates on a
lane (pure: no images).

A pool holds one metric's per-case scores of blocks of the corpus under further seeds. A simulated session takes
blocks in a random order: its first is the corpus, the next ones the cases an undecided test adds. Its baseline's
figures are measured on the session's own cases, as a baseline of those cases would measure them
(quality_suite/margin_spread.py): the spread floor from the pool's blend at 1 x the class's margin, tau_q from the
pool's images rounded to 8 bits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dit_ar_contract.classes import ChangeClass
from dit_ar_contract.config import QualityContract

from . import margin_spread, task_metrics, task_tests
from .calibration import PassRate
from .case_scores import CaseScores
from .noninferiority import Decision, degradation


class PoolSupply:
    """The later blocks of one simulated session (task_tests.CaseSupply) over recorded per-case scores."""

    def __init__(self, ids: list[str], cand: CaseScores, refs: dict[str, CaseScores]) -> None:
        self.ids, self.cand, self.refs, self.used = ids, cand, refs, 0

    def available(self) -> int:
        return len(self.ids) - self.used

    def take(self, count: int, references: tuple[str, ...]) -> task_tests.Block:
        block = self.ids[self.used:self.used + count]
        self.used += len(block)
        return task_tests.Block(self.cand.select(block), {r: self.refs[r].select(block) for r in references})


@dataclass(frozen=True)
class Pool:
    """One metric's per-case scores of a pool, with what a baseline of a session's cases measures from it: the
    floor's blend at 1 x the class's margin (`at_margin`) and tau_q's harmless change (`eight_bit`)."""

    metric: str
    base: CaseScores
    blocks: Sequence[Sequence[str]]
    task_base: float  # the baseline's corpus score
    resolution: float
    at_margin: CaseScores | None = None
    eight_bit: CaseScores | None = None
    prompts: Mapping[str, str] | None = None  # case id -> prompt, the floor's bootstrap strata (None: by case)

    def _losses(self, other: CaseScores | None, ids: Sequence[str]) -> tuple[np.ndarray, list[str]]:
        if other is None:
            return np.zeros(0), []
        theirs = other.rows.get(self.metric, {})
        common = [cid for cid in ids if cid in theirs and cid in self.base.rows.get(self.metric, {})]
        b, c = self.base.select(common).paired(other.select(common), self.metric)
        return degradation(b, c, task_metrics.metric(self.metric).lower_is_better), common

    def figures(self, cls: ChangeClass, quality: QualityContract, ids: Sequence[str]) -> task_tests.Figures:
        """The figures a baseline of the cases `ids` stores: floor and tau_q measured on those cases."""
        m = self.metric
        margin, source = task_tests.margins(cls, quality, {m: self.task_base}, {m: self.resolution})[m]
        d, common = self._losses(self.at_margin, ids)
        strata = [(self.prompts or {}).get(cid, cid) for cid in common]
        spreads = {source: {m: margin_spread.floor_of(d, strata, margin)[1]}} if len(d) else {}
        loss, _ = self._losses(self.eight_bit, ids)
        tau = {m: margin_spread.tolerance_of(loss, quality.exact.envelope_multiple, self.task_base).tolerance} \
            if len(loss) else {}
        return task_tests.Figures({m: self.task_base}, {m: self.resolution}, spreads, tau)


def session(cls: ChangeClass | str, quality: QualityContract, pool: Pool, cand: CaseScores,
            order: Sequence[int]) -> tuple[bool, int]:
    """One simulated session over the pool's blocks in `order` (the first as the corpus): whether the gate passed,
    and the cases of its decision."""
    cls = ChangeClass.from_word(cls)
    first = list(pool.blocks[order[0]])
    budget = task_tests.design(quality, len(first)).max_cases
    ids = [cid for k in order for cid in pool.blocks[k]][:budget]
    figures = pool.figures(cls, quality, ids)
    supply = PoolSupply(ids[len(first):], cand, {task_tests.BASELINE: pool.base})
    start = task_tests.Block(cand.select(first), {task_tests.BASELINE: pool.base.select(first)})
    judgement = task_tests.run(cls, quality, figures, start, len(first), supply)
    return judgement.decision is Decision.PASS, judgement.cases


def pass_rate(cls: ChangeClass | str, quality: QualityContract, pool: Pool, cand: CaseScores, sessions: int,
              rng: np.random.Generator) -> PassRate:
    """Sessions drawn from the pool: blocks in a random order, the first as the corpus, the rest as further cases
    up to the budget; a session passes when the gate of class `cls` passes on the pool's metric."""
    per_block = len(pool.blocks[0])
    per_session = max(1, -(-task_tests.design(quality, per_block).max_cases // per_block))
    passes, cases = 0, 0
    for _ in range(sessions):
        passed, n = session(cls, quality, pool, cand, rng.permutation(len(pool.blocks))[:per_session])
        passes += passed
        cases += n
    return PassRate(passes, sessions, cases / max(sessions, 1))
