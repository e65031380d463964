"""The candidate's quality against the original baseline: the baseline's reference outputs of the cases, the
assessment under the declared (and inherited) class, and the difference pictures of the worst and the failing
cases in the run folder."""

from __future__ import annotations

import dataclasses

from dit_ar_contract.classes import MILDEST, ChangeClass
from dit_ar_contract.config import QualityContract
from dit_ar_contract.errors import Refused
from quality_suite import diff_images, margin_spread, refusal, task_tests
from quality_suite.artifacts import load_cases
from quality_suite.assessment import NO_SPREAD, BaselineReference, Outputs, QualityAssessment, TaskInputs, assess
from quality_suite.audit import AuditEvidence
from quality_suite.corpora import Case
from quality_suite.own_change import ParentOutputs

from ...state.baseline import BaselineSummary, cases_dir
from ...state.runs import RunPaths
from ...state.session import Session
from .generation import CandidateRun


def reference(session: Session, base: BaselineSummary, cases: list[Case]) -> BaselineReference:
    """The verified baseline's outputs of `cases`, with its envelope and task figures."""
    images, latents = load_cases(cases_dir(session.baseline_dir), cases)
    return BaselineReference(Outputs(images, latents, AuditEvidence.from_dict(base.evidence)), base.envelope,
                             base.task_metrics, base.task_case_pass, base.task_envelope, base.task_resolution,
                             margin_spread.floors(base.task_spread), margin_spread.tolerances(base.task_spread))


def figures(base: BaselineSummary, quality: QualityContract) -> task_tests.Figures:
    """What the baseline stored that the task-score tests need (its corpus scores, resolutions, spread floors and
    tau_q), for tests outside the experiment's assessment (the confirmation, the timed rounds); a baseline without
    floors or tau_q is refused as the assessment refuses it."""
    floors, taus = margin_spread.floors(base.task_spread), margin_spread.tolerances(base.task_spread)
    if floors is None or taus is None:
        raise Refused(NO_SPREAD)
    resolution = base.task_resolution or task_tests.fallback_resolution(base.task_metrics, base.task_envelope,
                                                                        quality.exact.envelope_multiple)
    return task_tests.Figures(base.task_metrics, resolution, floors, taus)


def budget_key(session: Session) -> str:
    """The setting that raises this lane's case budget."""
    return f"lanes.{session.lane.name}.{refusal.BUDGET_KEY}"


def assess_run(session: Session, declared_class: str, run: CandidateRun, ref: BaselineReference, cases: list[Case],
               run_paths: RunPaths, whole_corpus: bool, inputs: TaskInputs | None = None,
               reused: QualityAssessment | None = None,
               parent: ParentOutputs | None = None) -> QualityAssessment:
    """The candidate's outputs against the baseline's under the class gates (the task-score tests with `inputs`:
    loop/quality/cases.py; or `reused`: the best's judging of the same outputs, loop/quality/reuse.py), its own change
    against the best's outputs (`parent`: loop/quality/parent.py), and the pictures of the worst cases and of each
    failing case written into the run folder."""
    best = session.best()
    lane = session.lane
    if reused is not None:  # the best's outputs bit for bit: the own change is exact (none at all)
        result = dataclasses.replace(reused, own_class=ChangeClass.EXACT.word if parent else "",
                                     own_reasons=("the outputs are the best's bit for bit",) if parent else ())
    else:
        result = assess(declared_class, best.effective_class if best else MILDEST,
                        Outputs(run.outputs.images, run.outputs.latents, run.evidence), ref, cases,
                        lane.quality, lane.task_metrics, session.root, whole_corpus=whole_corpus, inputs=inputs,
                        parent=parent, budget_key=budget_key(session))
    diff_images.write(run_paths.worst_cases, run_paths.cases, run.outputs.images, ref.outputs.images, result.fidelity)
    failing = [cid for cid, case in result.per_case.items() if any(not c.passed for c in case.checks)]
    diff_images.case_diffs(run.outputs.images, ref.outputs.images, result.fidelity, failing, run_paths.diffs)
    return result
