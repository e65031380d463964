"""The quality assessment of one candidate against the original baseline (docs/design/quality.md), as a pure function.

`assess` audits the declared class, measures per-case fidelity (and LPIPS where available), computes
the task metrics, runs the paired task-score tests of the approximate and quantization classes
(quality_suite/task_tests.py) and applies the gate of the effective class. It reads nothing from disk but the
metric weights and writes nothing; what the tests compare beyond the corpus (the parent's scores, further cases)
comes in through `TaskInputs`, and the loop decides where the result goes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dit_ar_contract.classes import ChangeClass
from dit_ar_contract.config import QualityContract
from dit_ar_contract.errors import Refused

from . import audit, gates, own_change, perceptual, refusal, sharpness, task_metrics, task_tests
from .artifacts import per_case_fidelity
from .case_scores import CaseScores
from .corpora import Case
from .metrics import summarize
from .noninferiority import TestResult


@dataclass(frozen=True)
class Outputs:
    """One side's images [3,H,W] and latents [C,h,w] per case id, with its audit evidence."""

    images: dict[str, torch.Tensor]
    latents: dict[str, torch.Tensor]
    evidence: audit.AuditEvidence


NO_SPREAD = ("the baseline stores no spread floor of the current kind or no tau_q (taken before the task-score tests "
             "used a quantile of the floor's bootstrap and the quantization tolerance), so an approximate or "
             "quantization change cannot be judged against it; take a fresh baseline: `dit-ar init --tag NEW` then "
             "`dit-ar baseline` (docs/design/quality-verdict.md)")


@dataclass(frozen=True)
class BaselineReference:
    """What the baseline recorded that a candidate is judged against."""

    outputs: Outputs
    envelope: dict[str, float]
    task_metrics: dict[str, float]
    task_case_pass: dict[str, bool]
    task_envelope: dict[str, float] = field(default_factory=dict)  # a score's benign variation at baseline
    task_resolution: dict[str, float] = field(default_factory=dict)  # what a harmless change does to each score
    task_spread: dict[str, dict[str, float]] | None = None  # the tests' spread floors (None: the baseline has none)
    task_tolerance: dict[str, float] | None = None  # tau_q per metric (None: the baseline has none)


@dataclass(frozen=True)
class TaskInputs:
    """What the paired task-score tests compare beyond the candidate's corpus outputs.

    `baseline`: the baseline's per-case scores of the corpus (None: computed from its stored images);
    `parent`: called when the tolerance claim must also hold against the current best, returns its per-case scores of
    the corpus; `supply`: further cases for undecided tests (None: the corpus alone)."""

    baseline: CaseScores | None = None
    parent: Callable[[], CaseScores] | None = None
    supply: task_tests.CaseSupply | None = None


@dataclass(frozen=True)
class CaseResult:
    fidelity: dict[str, float]
    checks: tuple[gates.Check, ...]
    task_pass: bool | None = None


@dataclass(frozen=True)
class QualityAssessment:
    declared_class: str
    effective_class: str
    audit_reasons: tuple[str, ...]
    per_case: dict[str, CaseResult]
    aggregate: tuple[gates.Check, ...]
    summary: dict[str, Any]
    task_candidate: dict[str, float]
    task_baseline: dict[str, float]
    lpips: str = "not measured"
    fidelity: dict[str, dict[str, float]] = field(default_factory=dict)
    approximate_outputs: bool = False  # the outputs may drift like an approximation's (dit_ar_contract.classes)
    task_tests: tuple[TestResult, ...] = ()  # the paired non-inferiority tests (approximate, quantization)
    own_class: str = ""  # the class of the change from the best (quality_suite/own_change.py); "": not judged
    own_reasons: tuple[str, ...] = ()  # what the audit found against the best's pipeline
    refusals: tuple[refusal.Refusal, ...] = ()  # each failed task-score test: what would decide it

    def case_checks(self, case_id: str) -> tuple[gates.Check, ...]:
        return self.per_case[case_id].checks

    def failures(self) -> list[gates.Check]:
        failed = [c for case in self.per_case.values() for c in case.checks if not c.passed]
        return failed + [c for c in self.aggregate if not c.passed]

    @property
    def passed(self) -> bool:
        return not self.failures()

    def reasons(self) -> list[str]:
        """The failures in words for the verdict: a failed task-score test's check as its refusal's line (what
        failed and by how much, the case budget and its key, whether more cases could pass it, the claim)."""
        lines = {r.check_name: r.line() for r in self.refusals}
        return [lines.get(c.name, c.describe()) if c.case is None else c.describe() for c in self.failures()]

    def headline(self, tests: bool = True) -> str:
        """One line for the ledger: the class, the worst fidelity, the task scores and (with `tests`) each paired
        task-score test's degradation with its upper bound."""
        parts = [own_change.class_line(self.effective_class, self.own_class)]
        for key in ("psnr_db", "ssim", "latent_rel_l2"):
            if key in self.summary:
                worst = self.summary[key]["worst"]
                parts.append(f"worst_{key}={'inf' if math.isinf(worst) else f'{worst:.4g}'}")
        parts += [f"{k}={v:.4g}" for k, v in self.task_candidate.items()]
        parts += [self.test_text(r) for r in self.task_tests] if tests else []
        failed = self.failures()
        if failed:
            parts.append(f"FAILED {len(failed)} checks, first: {failed[0].describe()}")
        return "; ".join(parts)

    @staticmethod
    def test_text(r: TestResult) -> str:
        """'judge_accuracy vs baseline: degradation +0.0012 [upper bound +0.011; se 0.0042, at-margin floor 0.0042]
        vs approximate margin 0.025 over 160 cases; severe cases (loss > 0.5) 0 of 160 [bound 2.28% <= 2.5%],
        n_min 119: PASS' (the se is the larger of the sample's and the floor; a quantization's line gives the cases
        beyond tau_q, p0 and n_pass instead; a set metric's says it is reported, not gated)."""
        if not r.looks:
            return f"{r.metric} vs {r.reference}: {r.reason}"
        look = r.last
        floor = f", at-margin floor {look.floor_se:.2g}" if r.gated else ""
        line = (f"{r.metric} vs {r.reference}: degradation {look.estimate:+.3g} [upper bound {look.upper:+.3g}; "
                f"se {look.se:.2g}{floor}] vs {r.margin_source} {r.margin:.3g} over {look.n} cases")
        if r.rule is not None:
            line += f"; {r.condition_text()}"
        if not r.gated:
            return f"{line}: {r.reason or 'reported, not gated'}"
        return f"{line}: {r.decision.value.upper()}" + (f" ({r.reason})" if r.reason and not r.passed else "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "declared_class": self.declared_class, "effective_class": self.effective_class,
            "audit_reasons": list(self.audit_reasons), "summary": self.summary, "lpips": self.lpips,
            "task_candidate": self.task_candidate, "task_baseline": self.task_baseline,
            "aggregate": [c.as_dict() for c in self.aggregate],
            "per_case": {cid: {"fidelity": v.fidelity, "task_pass": v.task_pass,
                               "checks": [c.as_dict() for c in v.checks]} for cid, v in self.per_case.items()},
            "failures": [c.describe() for c in self.failures()], "approximate_outputs": self.approximate_outputs,
            "task_tests": [r.as_dict() for r in self.task_tests],
            "own_class": self.own_class, "own_reasons": list(self.own_reasons),
            "refusals": [r.as_dict() for r in self.refusals],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QualityAssessment:
        """What `as_dict` wrote (quality.json); `failures` is derived from the checks again."""
        per_case = {}
        for cid, case in (data.get("per_case") or {}).items():
            if isinstance(case, Mapping):
                per_case[str(cid)] = CaseResult(dict(case.get("fidelity") or {}),
                                                tuple(gates.Check.from_dict(c) for c in case.get("checks") or ()),
                                                case.get("task_pass"))
        return cls(str(data.get("declared_class", "")), str(data.get("effective_class", "")),
                   tuple(str(r) for r in data.get("audit_reasons") or ()), per_case,
                   tuple(gates.Check.from_dict(c) for c in data.get("aggregate") or ()),
                   dict(data.get("summary") or {}),
                   dict(data.get("task_candidate") or {}), dict(data.get("task_baseline") or {}),
                   str(data.get("lpips", "not measured")), {cid: case.fidelity for cid, case in per_case.items()},
                   bool(data.get("approximate_outputs", False)),
                   tuple(TestResult.from_dict(r) for r in data.get("task_tests") or ()),
                   str(data.get("own_class", "")), tuple(str(r) for r in data.get("own_reasons") or ()),
                   tuple(refusal.Refusal.from_dict(r) for r in data.get("refusals") or () if isinstance(r, Mapping)))


def _tests(effective: str, scores: dict[str, task_metrics.TaskScore], baseline: BaselineReference,
           cases: list[Case], quality: QualityContract, metric_names: tuple[str, ...], root: Path,
           inputs: TaskInputs, approximate_chain: bool = False) -> tuple[TestResult, ...]:
    """The paired task-score tests of the effective class over the corpus, then over further cases if undecided
    (`approximate_chain`: the outputs build on an approximate keep, task_tests.specs)."""
    cls = ChangeClass.from_word(effective)
    if not cls.judged_on_the_task or not baseline.task_metrics:
        return ()
    if baseline.task_spread is None or baseline.task_tolerance is None:
        raise Refused(NO_SPREAD)
    resolution = baseline.task_resolution or task_tests.fallback_resolution(
        baseline.task_metrics, baseline.task_envelope, quality.exact.envelope_multiple)
    figures = task_tests.Figures(baseline.task_metrics, resolution, baseline.task_spread, baseline.task_tolerance)
    base = inputs.baseline
    if base is None:
        base = CaseScores.of(task_metrics.compute(metric_names, baseline.outputs.images, cases, root, quality))
    refs = {task_tests.BASELINE: base.select([c.id for c in cases])}
    against_parent = inputs.parent is not None
    if cls is ChangeClass.QUANTIZATION and inputs.parent is not None:
        refs[task_tests.PARENT] = inputs.parent()
    first = task_tests.Block(CaseScores.of(scores), refs)
    return task_tests.run(cls, quality, figures, first, len(cases), inputs.supply, against_parent,
                          approximate_chain).results


def assess(declared: str, inherited: str, candidate: Outputs, baseline: BaselineReference, cases: list[Case],
           quality: QualityContract, metric_names: tuple[str, ...], root: Path,
           whole_corpus: bool = True, inputs: TaskInputs | None = None,
           parent: own_change.ParentOutputs | None = None, budget_key: str = refusal.BUDGET_KEY) -> QualityAssessment:
    """Audit the class, measure fidelity and task quality, and apply the effective class's gate.

    A plain run of a few cases (`whole_corpus=False`, an IDE click on one case) is judged case by case:
    corpus-level checks (mean fidelity, task scores over the corpus, a Fréchet distance) mean nothing over
    a subset, so only per-case task metrics are computed and no aggregate check is made.

    `inputs.parent` is called only when the effective class is quantization; without `inputs` the tests compare
    the corpus with the baseline's stored outputs alone. `parent` (the best's outputs, when the best is not the
    original baseline) judges the candidate's own change against the best as well (quality_suite/own_change.py).
    Each failed task-score test gets its refusal (quality_suite/refusal.py), `budget_key` naming the setting
    that raises the lane's case budget."""
    fid = per_case_fidelity(candidate.images, candidate.latents, baseline.outputs.images, baseline.outputs.latents)
    # bit-identical latents and images in every case: fewer denoiser rows then removed redundant passes
    same = len(fid) == len(cases) > 0 and all(f["latent_max_abs"] == 0 and f["psnr_db"] == math.inf
                                              for f in fid.values())
    effective, reasons = audit.effective_class(declared, candidate.evidence, baseline.outputs.evidence, inherited,
                                               same)
    approx = audit.approximate_outputs(declared, candidate.evidence, baseline.outputs.evidence, inherited, same)
    lpips_values, lpips_status = perceptual.evaluate(candidate.images, baseline.outputs.images, quality)
    for cid, value in (lpips_values or {}).items():
        fid[cid]["lpips"] = value
    if not whole_corpus:
        metric_names = task_metrics.per_case_only(metric_names)
    scores = task_metrics.compute(metric_names, candidate.images, cases, root, quality)
    cand_pass = task_metrics.case_passes(scores)
    per_case = {}
    for case in cases:
        checks = gates.case_checks(effective, case.id, fid[case.id], quality, baseline.envelope,
                                   baseline.task_case_pass.get(case.id), cand_pass.get(case.id), approx)
        per_case[case.id] = CaseResult(fid[case.id], tuple(checks), cand_pass.get(case.id))
    own = own_change.judge(declared, candidate.images, candidate.latents, candidate.evidence, parent, quality,
                           baseline.envelope) if parent is not None and whole_corpus else None
    for cid, extra in (own.checks if own else {}).items():
        if cid in per_case:
            per_case[cid] = CaseResult(per_case[cid].fidelity, per_case[cid].checks + extra, per_case[cid].task_pass)
    summary = summarize(fid)
    task_cand = {k: v.value for k, v in scores.items()}
    tests = _tests(effective, scores, baseline, cases, quality, metric_names, root,
                   inputs or TaskInputs(), approx) if whole_corpus else ()
    aggregate = gates.aggregate_checks(effective, summary, quality, task_cand, baseline.task_metrics,
                                       task_metrics.lower_is_better(), approx, baseline.task_envelope,
                                       sharpness.mean_abs_log_change(candidate.images, baseline.outputs.images),
                                       tests) if whole_corpus else []
    return QualityAssessment(declared, effective, tuple(reasons), per_case, tuple(aggregate), summary, task_cand,
                             dict(baseline.task_metrics), lpips_status, fid, approx, tests,
                             own.cls.word if own else "", own.reasons if own else (),
                             refusals_of(tests, quality, len(cases), budget_key))


def refusals_of(tests: tuple[TestResult, ...], quality: QualityContract, corpus: int,
                key: str) -> tuple[refusal.Refusal, ...]:
    """What would decide each task-score test that failed on its own (quality_suite/refusal.py)."""
    plan = task_tests.design(quality, corpus)
    found = (refusal.explain(r, plan, corpus, quality.noninferiority.case_budget_multiple, key) for r in tests)
    return tuple(r for r in found if r is not None)
