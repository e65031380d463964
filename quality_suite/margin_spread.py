"""What the harness measures at baseline for the task-score tests, on the baseline's own images (never from
candidate code): the spread floor of each per-case test and tau_q, the per-case tolerance of the quantization claim.

* The spread floor. For each margin a test may use (the approximate margin, the resolution) and each per-case task
  metric, the baseline's images of all its cases (corpus, holdout, replicas) are blended with another case's image
  (`calibration.blend`) at the weight where the metric's degradation, averaged over corpus-size blocks, equals the
  margin (`calibration.weight_for`). The floor is a conservative quantile of the blend's coefficient of variation
  times the margin: the `FLOOR_QUANTILE` quantile of the CV over `FLOOR_RESAMPLES` bootstrap resamples of the cases,
  stratified by prompt (`floor_of`; the plain estimate, CV x margin, is stored beside it as `point`). A floor from
  the test's own cases is small exactly when those cases lack the heavy-loss ones, which is when the test's sample
  lacks them too; the quantile keeps it from following the sample down.
* tau_q. The baseline's images rounded to 8 bits, as any saved image is, are scored on all its cases; tau_q is the
  exact gate's envelope multiple times the largest per-case loss that rounding shows, never below the score's float
  resolution (`tolerance_of`).

Set metrics (a Frechet distance) get neither: they are reported, not gated. A baseline whose record lacks the
floor's quantile or tau_q was taken before they existed; `floors` and `tolerances` then return None and the
assessment refuses it with the command that takes a fresh one (`assessment.NO_SPREAD`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from . import calibration, task_metrics
from .case_scores import CaseScores
from .corpora import Case
from .gates import resolution_floor
from .noninferiority import degradation

APPROXIMATE, RESOLUTION = "approximate margin", "resolution"  # the margin sources a spread is measured for
TOLERANCE = "tolerance"  # the record's entry of tau_q per metric (beside the margin sources)
FLOOR_QUANTILE = 0.75  # the floor the tests use: this quantile of the blend's CV over the stratified bootstrap
FLOOR_RESAMPLES = 500
EIGHT_BIT = "8-bit images"  # the harmless change tau_q is measured from
Scorer = Callable[[dict[str, torch.Tensor]], CaseScores]


@dataclass(frozen=True)
class MarginSpread:
    """One metric's spread floor at one margin, with how it was measured."""

    margin: float  # the degradation the blend was set to
    weight: float  # the blend weight found
    degradation: float  # the blend's degradation averaged over corpus-size blocks
    spread: float  # the floor the tests use: the FLOOR_QUANTILE quantile of the bootstrap CV, times the margin
    cases: int
    point: float = 0.0  # the plain estimate: the blend's CV over the cases times the margin
    quantile: float = FLOOR_QUANTILE

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MarginSpread:
        return cls(*(float(data[k]) for k in ("margin", "weight", "degradation", "spread")), int(data["cases"]),
                   float(data["point"]), float(data["quantile"]))


@dataclass(frozen=True)
class Tolerance:
    """One metric's tau_q: the envelope multiple times the largest per-case loss of a harmless change."""

    tolerance: float
    largest: float
    multiple: float
    cases: int
    change: str = EIGHT_BIT


@dataclass(frozen=True)
class AtBaseline:
    """What `measure` found: per margin source and per-case metric the floor; per metric tau_q."""

    spreads: dict[str, dict[str, MarginSpread]]
    tolerances: dict[str, Tolerance]


def stratified_resamples(strata: Sequence[Any], resamples: int, seed: int = 0) -> np.ndarray:
    """[resamples, n] case indices: within each stratum (a prompt) its cases drawn with replacement."""
    _, label = np.unique(np.asarray([str(s) for s in strata]), return_inverse=True)
    order = np.argsort(label, kind="stable")  # the cases grouped by stratum
    sizes = np.bincount(label)
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    column = label[order]  # each column of the result draws within the stratum of the case it stands for
    u = np.random.default_rng(seed).random((resamples, len(order)))
    return order[start[column] + (u * sizes[column]).astype(np.int64)]


def floor_of(d: np.ndarray, strata: Sequence[Any], margin: float, quantile: float = FLOOR_QUANTILE,
             resamples: int = FLOOR_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """(point, floor) of per-case degradations `d` of a blend near the margin: CV x margin, and the `quantile`
    quantile of the CV over a bootstrap stratified by `strata`, times the margin."""
    d = np.asarray(d, np.float64)
    if len(d) < 2:
        return 0.0, 0.0
    mean = float(d.mean())
    point = float(d.std(ddof=1)) / mean * margin if mean > 0 else float(d.std(ddof=1))
    rows = d[stratified_resamples(strata, resamples, seed)]
    means = rows.mean(axis=1)
    cvs = np.where(means > 0, rows.std(axis=1, ddof=1) / np.where(means > 0, means, 1.0), np.inf)
    return point, float(np.quantile(cvs, quantile)) * margin


def tolerance_of(loss: np.ndarray, multiple: float, score: float) -> Tolerance:
    """tau_q from the per-case losses of a harmless change: multiple x the largest, at least the float resolution."""
    largest = float(np.abs(loss).max()) if len(loss) else 0.0
    return Tolerance(max(multiple * largest, resolution_floor(score)), largest, multiple, len(loss))


def rounded_to_8_bits(images: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The images as an 8-bit file holds them: a harmless change the harness applies itself."""
    return {cid: (img.float().clamp(0, 1) * 255).round() / 255 for cid, img in images.items()}


def _paired_ids(a: CaseScores, b: CaseScores, name: str) -> list[str]:
    theirs = b.rows.get(name, {})
    return [cid for cid in a.ids(name) if cid in theirs]


def measure(images: dict[str, torch.Tensor], cases: Sequence[Case], block: int, score: Scorer,
            margins: Mapping[str, Mapping[str, float]], multiple: float) -> AtBaseline:
    """Per margin source, per per-case metric: the floor of the blend at that margin, on `images` of `cases`
    (blocks of `block` cases for the degradation the blend is set to; `score` scores images of all cases); and per
    per-case metric tau_q (`multiple`: the exact gate's envelope multiple)."""
    ids = [c.id for c in cases]
    prompt = {c.id: c.prompt for c in cases}
    blocks = [ids[i:i + block] for i in range(0, len(ids), block)]
    memo: dict[float, CaseScores] = {}

    def scored(w: float) -> CaseScores:
        if w not in memo:
            memo[w] = score(calibration.blend(images, list(cases), w) if w > 0 else images)
        return memo[w]

    base = scored(0.0)
    spreads: dict[str, dict[str, MarginSpread]] = {source: {} for source in margins}
    names: dict[str, None] = {}
    for source, per_metric in margins.items():
        for name, margin in per_metric.items():
            if task_metrics.metric(name).statistic is not None:
                continue  # reported, not gated
            names[name] = None

            def degraded(x: float, name: str = name) -> float:
                return calibration.block_degradation(name, base, scored(x), blocks)

            w = calibration.weight_for(degraded, margin, grid=11, steps=8)
            common = _paired_ids(base, scored(w), name)
            b, c = base.paired(scored(w), name)
            d = degradation(b, c, task_metrics.metric(name).lower_is_better)
            point, floor = floor_of(d, [prompt[cid] for cid in common], margin)
            spreads[source][name] = MarginSpread(margin, w, degraded(w), floor, len(d), point)
    rounded = score(rounded_to_8_bits(images)) if names else CaseScores()
    tolerances = {}
    for name in names:
        b, c = base.paired(rounded, name)
        loss = degradation(b, c, task_metrics.metric(name).lower_is_better)
        tolerances[name] = tolerance_of(loss, multiple, float(np.mean(b)) if len(b) else 0.0)
    return AtBaseline(spreads, tolerances)


def as_record(measured: AtBaseline) -> dict[str, dict[str, dict[str, Any]]]:
    record: dict[str, dict[str, dict[str, Any]]] = {
        source: {name: asdict(s) for name, s in per.items()} for source, per in measured.spreads.items()}
    record[TOLERANCE] = {name: asdict(t) for name, t in measured.tolerances.items()}
    return record


def _current(record: Mapping[str, Mapping[str, Mapping[str, Any]]] | None) -> bool:
    """Whether a baseline's record is of the current kind: tau_q stored, every floor a quantile."""
    if not record or TOLERANCE not in record:
        return False
    return all("quantile" in s for source, per in record.items() if source != TOLERANCE for s in per.values())


def floors(record: Mapping[str, Mapping[str, Mapping[str, Any]]] | None) -> dict[str, dict[str, float]] | None:
    """Per margin source, per metric: the floor a baseline stored (None: a baseline taken before the floor was a
    quantile and tau_q existed; a lane without per-case metrics stores its margin sources with no metric)."""
    if not _current(record):
        return None
    assert record is not None
    return {source: {name: MarginSpread.from_dict(s).spread for name, s in per.items()}
            for source, per in record.items() if source != TOLERANCE}


def tolerances(record: Mapping[str, Mapping[str, Mapping[str, Any]]] | None) -> dict[str, float] | None:
    """Per metric: tau_q as the baseline stored it (None: a baseline taken before tau_q existed)."""
    if not _current(record):
        return None
    assert record is not None
    return {name: float(t["tolerance"]) for name, t in record[TOLERANCE].items()}
