"""The spread floor of the paired task-score tests: the per-case spread of a degradation exactly at the margin,
measured by the harness at baseline on the baseline's own images (never from candidate code).

For each margin a test may use (the approximate margin, the resolution) and each task metric, the baseline's images
of all its cases (corpus, holdout, replicas) are blended with another case's image (`calibration.blend`) at the
weight where the metric's degradation, averaged over corpus-size blocks, equals the margin (`calibration.weight_for`).
The spread of that blend's degradation is the floor: for a per-case score the standard deviation of the per-case
degradations, scaled to the margin (spread x margin / the blend's degradation), i.e. the blend's coefficient of
variation times the margin. Set metrics (a Frechet distance) get none (`measure`); `calibration.spread_of` still
computes a set metric's (the paired bootstrap's standard error times sqrt(n)) for the studies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from . import calibration, task_metrics
from .calibration import spread_of
from .case_scores import CaseScores
from .corpora import Case

APPROXIMATE, RESOLUTION = "approximate margin", "resolution"  # the margin sources a spread is measured for
Scorer = Callable[[dict[str, torch.Tensor]], CaseScores]


@dataclass(frozen=True)
class MarginSpread:
    """One metric's spread at one margin, with how it was measured."""

    margin: float  # the degradation the blend was set to
    weight: float  # the blend weight found
    degradation: float  # the blend's degradation averaged over corpus-size blocks
    spread: float  # the floor: per-case spread of a degradation at the margin
    cases: int

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MarginSpread:
        return cls(*(float(data[k]) for k in ("margin", "weight", "degradation", "spread")), int(data["cases"]))


def measure(images: dict[str, torch.Tensor], cases: Sequence[Case], block: int, score: Scorer,
            margins: Mapping[str, Mapping[str, float]], resamples: int = 200) -> dict[str, dict[str, MarginSpread]]:
    """Per margin source, per per-case metric: the spread of the blend at that margin, on `images` of `cases`
    (blocks of `block` cases for the degradation the blend is set to; `score` scores images of all cases). Set
    metrics get no floor: their paired bootstrap keeps its level at the margin, and a floor from the blend's
    bootstrap refuses every harmless change within the case budget (the simulation measured both)."""
    ids = [c.id for c in cases]
    blocks = [ids[i:i + block] for i in range(0, len(ids), block)]
    memo: dict[float, CaseScores] = {}

    def scored(w: float) -> CaseScores:
        if w not in memo:
            memo[w] = score(calibration.blend(images, list(cases), w) if w > 0 else images)
        return memo[w]

    base = scored(0.0)
    out: dict[str, dict[str, MarginSpread]] = {source: {} for source in margins}
    for source, per_metric in margins.items():
        for name, margin in per_metric.items():
            if task_metrics.metric(name).statistic is not None:
                continue  # a set metric's bootstrap needs no floor (lab/notebook/quality-verdict.md)
            def degraded(x: float, name: str = name) -> float:
                return calibration.block_degradation(name, base, scored(x), blocks)

            w = calibration.weight_for(degraded, margin, grid=11, steps=8)
            measured = calibration.block_degradation(name, base, scored(w), blocks)
            b, c = base.paired(scored(w), name)
            out.setdefault(source, {})[name] = MarginSpread(margin, w, measured,
                                                            spread_of(name, b, c, margin, measured, resamples), len(b))
    return out


def as_record(spreads: Mapping[str, Mapping[str, MarginSpread]]) -> dict[str, dict[str, dict[str, float]]]:
    return {source: {name: asdict(s) for name, s in per.items()} for source, per in spreads.items()}


def floors(record: Mapping[str, Mapping[str, Mapping[str, Any]]] | None) -> dict[str, dict[str, float]] | None:
    """Per margin source, per metric: the floor a baseline stored (None: the baseline stored none, i.e. it was
    taken before the floor existed; a lane without per-case metrics stores its margin sources with no metric)."""
    if not record:
        return None
    return {source: {name: MarginSpread.from_dict(s).spread for name, s in per.items()}
            for source, per in record.items()}
