"""Task-quality scores (absolute, not relative to the baseline), by name, as the config requires them.

Every metric also gives what its paired non-inferiority test (quality_suite/noninferiority.py) compares case by
case: a per-case score where one exists (`TaskScore.per_case`: the judge's probability of the labelled digit, each
image's CLIP score, the classifier's probability margin of the labelled class), or, for a set metric (the Frechet
distance), each case's feature row (`TaskScore.features`) and the statistic that turns a set of rows into the
metric (`TaskMetric.statistic`), for the paired bootstrap over cases. A metric plugs in by filling these fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from dit_ar_contract.config import QualityContract
from dit_ar_contract.errors import Refused
from dit_ar_contract.guides import cite

from .corpora import Case

if TYPE_CHECKING:  # torch is imported by the metrics that compute, not by the checks doctor runs
    import torch


@dataclass(frozen=True)
class TaskScore:
    value: float
    per_case_pass: dict[str, bool] | None = None
    per_case: dict[str, float] | None = None  # each case's score; the paired test compares their mean
    features: dict[str, np.ndarray] | None = None  # a set metric: each case's feature row, for the paired bootstrap

    def rows(self) -> dict[str, np.ndarray]:
        """What the paired test compares, per case id: a scalar score or a feature row."""
        if self.features is not None:
            return {cid: np.asarray(row, np.float64) for cid, row in self.features.items()}
        return {cid: np.asarray(value, np.float64) for cid, value in (self.per_case or {}).items()}


@dataclass(frozen=True)
class TaskMetric:
    name: str
    lower_is_better: bool
    compute: Callable[[dict[str, torch.Tensor], list[Case], Path, QualityContract], TaskScore]
    check: Callable[[Path, QualityContract], None]
    needs_labels: bool = False  # scores agreement with the class written on each corpus case
    docs: str = ""  # where the setup it needs is explained
    per_case_note: str = ""  # what its per-case score is, in words (the paired test's unit)
    statistic: Callable[[np.ndarray], np.ndarray] | None = None  # a set metric: rows [B, n, d] -> values [B]
    # the severe-case test of a per-case score (quality_suite/case_rules.py): R, the largest loss one case can show
    # (0: the baseline's own score), and when a case counts as severe: a loss beyond severe_fraction x R, or (with
    # severe_at_flip) a score that changes sign from right (> 0) to wrong (<= 0)
    loss_bound: float = 1.0
    severe_fraction: float = 0.5
    severe_at_flip: bool = False


def _stack(images: dict[str, torch.Tensor], cases: list[Case]) -> torch.Tensor:
    import torch

    return torch.stack([images[c.id] for c in cases]).float().clamp(0, 1)


def _labelled(cases: list[Case], metric: str) -> list[Case]:
    labelled = [c for c in cases if c.label is not None]
    if not labelled:
        raise Refused(f"{metric} needs corpus cases with a 'label' (the class each case asks for): give the "
                      "corpus its labels, or take the metric out of the lane's task_metrics")
    return labelled


def _agreement(labelled: list[Case], logits: torch.Tensor, per_case: torch.Tensor) -> TaskScore:
    """Per case: predicted class == label; the score is the fraction that agree; `per_case` the continuous score."""
    pred = logits.argmax(dim=1)
    passes = {c.id: int(p) == int(c.label) for c, p in zip(labelled, pred.tolist())}
    values = {c.id: float(v) for c, v in zip(labelled, per_case.tolist())}
    return TaskScore(sum(passes.values()) / len(passes), passes, values)


def _label_probability(logits: torch.Tensor, labelled: list[Case]) -> torch.Tensor:
    import torch

    labels = torch.tensor([int(c.label) for c in labelled])
    return logits.double().softmax(dim=1)[torch.arange(len(labelled)), labels]


def _label_margin(logits: torch.Tensor, labelled: list[Case]) -> torch.Tensor:
    """Probability of the labelled class minus the largest other class's: positive exactly when top-1 is right."""
    import torch

    probs = logits.double().softmax(dim=1)
    labels = torch.tensor([int(c.label) for c in labelled])
    rows = torch.arange(len(labelled))
    own = probs[rows, labels]
    others = probs.clone()
    others[rows, labels] = -1.0
    return own - others.max(dim=1).values


def judge_accuracy(images: dict[str, torch.Tensor], cases: list[Case], root: Path,
                   quality: QualityContract) -> TaskScore:
    """Fraction of cases the trained digit judge classifies as the prompted label."""
    import torch

    from .judge import load_judge

    labelled = _labelled(cases, "judge_accuracy")
    judge = load_judge()
    with torch.inference_mode():
        logits = judge.logits(_stack(images, labelled))
    return _agreement(labelled, logits, _label_probability(logits, labelled))


def classifier_top1(images: dict[str, torch.Tensor], cases: list[Case], root: Path,
                    quality: QualityContract) -> TaskScore:
    """Fraction of labelled cases whose ImageNet class is the configured torchvision classifier's top-1 prediction."""
    from .classifier import classifier_spec, logits

    labelled = _labelled(cases, "classifier_top1")
    scores = logits(_stack(images, labelled), classifier_spec(quality, root))
    wrong = [c.id for c in labelled if not 0 <= int(c.label) < scores.shape[1]]
    if wrong:
        raise Refused(f"classifier_top1: the classifier tells {scores.shape[1]} classes apart but the labels of "
                      f"cases {wrong[:5]} are outside 0..{scores.shape[1] - 1}: use a classifier of these classes")
    return _agreement(labelled, scores, _label_margin(scores, labelled))


def frechet_distance(images: dict[str, torch.Tensor], cases: list[Case], root: Path,
                     quality: QualityContract) -> TaskScore:
    """Fréchet distance between judge features of the generations and of the real digits (torchmetrics FID)."""
    from .frechet import frechet_metric, judge_features

    stacked = _stack(images, cases)
    fid = frechet_metric()
    fid.update(stacked, real=False)
    rows = judge_features(stacked)
    return TaskScore(float(fid.compute()), features={c.id: row for c, row in zip(cases, rows)})


def _frechet_statistic(rows: np.ndarray) -> np.ndarray:
    from .frechet import frechet_of_features

    return frechet_of_features(rows)


def clip_score(images: dict[str, torch.Tensor], cases: list[Case], root: Path,
               quality: QualityContract) -> TaskScore:
    """Mean CLIP score of image and prompt with open_clip weights from a local file; per image its own score."""
    from .clip import clip_scores, clip_spec

    per_image = clip_scores(_stack(images, cases), [c.prompt for c in cases], clip_spec(quality, root))
    values = {c.id: float(v) for c, v in zip(cases, per_image.tolist())}
    return TaskScore(float(per_image.mean()) if len(values) else 0.0, per_case=values)


def _check_judge(root: Path, quality: QualityContract) -> None:
    from .judge_files import JUDGE_DIR, STATS_NAME, WEIGHTS_NAME

    for name in (WEIGHTS_NAME, STATS_NAME):
        if not (JUDGE_DIR / name).is_file():
            raise Refused(f"the digit judge file {JUDGE_DIR / name} is missing; it ships with the package "
                          "(regenerate with: python -m quality_suite.judge.train)")


def _check_clip(root: Path, quality: QualityContract) -> None:
    from .clip import clip_spec

    clip_spec(quality, root)


def _check_classifier(root: Path, quality: QualityContract) -> None:
    from .classifier import check

    check(quality, root)


LOCAL_WEIGHTS_DOCS = f"{cite('task-metrics')}; CLIP weights: {cite('clip-weights')}"

REGISTRY: dict[str, TaskMetric] = {
    "judge_accuracy": TaskMetric("judge_accuracy", False, judge_accuracy, _check_judge, needs_labels=True,
                                 per_case_note="the judge's probability of the labelled digit"),
    "frechet_distance": TaskMetric("frechet_distance", True, frechet_distance, _check_judge,
                                   per_case_note="set metric: paired bootstrap over the cases' judge features",
                                   statistic=_frechet_statistic),
    "clip_score": TaskMetric("clip_score", False, clip_score, _check_clip, docs=LOCAL_WEIGHTS_DOCS,
                             per_case_note="each image's CLIP score", loss_bound=0.0),
    "classifier_top1": TaskMetric("classifier_top1", False, classifier_top1, _check_classifier, needs_labels=True,
                                  docs=LOCAL_WEIGHTS_DOCS,
                                  per_case_note="the classifier's probability of the label minus the top other's",
                                  loss_bound=2.0, severe_at_flip=True),
}


def metric(name: str) -> TaskMetric:
    """The registered metric `name` (a setup error naming the known ones when unknown)."""
    return _metric(name)


def lower_is_better() -> set[str]:
    return {m.name for m in REGISTRY.values() if m.lower_is_better}


def _metric(name: str) -> TaskMetric:
    if name not in REGISTRY:
        raise Refused(f"unknown task metric {name!r}: known metrics are {sorted(REGISTRY)}")
    return REGISTRY[name]


def problem(name: str, quality: QualityContract, root: Path, cases: list[Case] | None = None) -> str | None:
    """Why task metric `name` cannot be computed here (settings, local weights, corpus labels when `cases` are
    given), or None when it can; the words are those of the setup error `check_available` would raise."""
    try:
        metric = _metric(name)
        metric.check(Path(root), quality)
    except (Refused, ImportError) as exc:
        return str(exc)
    if metric.needs_labels and cases is not None and all(c.label is None for c in cases):
        return f"{name} needs corpus cases with a 'label' (the class each case asks for); this corpus has none"
    return None


def needs_labels(name: str) -> bool:
    return _metric(name).needs_labels


def docs(name: str) -> str:
    """Where the setup of metric `name` is explained ("" when it needs none)."""
    return _metric(name).docs


def check_available(names: tuple[str, ...] | list[str], quality: QualityContract, root: Path) -> None:
    """Refuse (setup error, nothing changed) when a required metric cannot be computed here."""
    from . import perceptual

    for name in names:
        _metric(name).check(Path(root), quality)
    perceptual.check(quality)


def compute(names: tuple[str, ...] | list[str], images: dict[str, torch.Tensor], cases: list[Case],
            root: Path, quality: QualityContract) -> dict[str, TaskScore]:
    """Every required task metric; an unknown name is a setup error that names the known ones."""
    return {name: _metric(name).compute(images, cases, root, quality) for name in names}


def per_case_only(names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The metrics that score each case on its own (a label agreement), computable over any subset."""
    return tuple(name for name in names if _metric(name).needs_labels)


def case_passes(scores: dict[str, TaskScore]) -> dict[str, bool]:
    """A case passes the task when every per-case task score says so."""
    merged: dict[str, bool] = {}
    for score in scores.values():
        for cid, ok in (score.per_case_pass or {}).items():
            merged[cid] = merged.get(cid, True) and ok
    return merged
