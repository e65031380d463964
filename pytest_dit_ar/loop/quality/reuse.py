"""What an experiment reuses of the best (state/best_outputs.py): the best's stored corpus outputs and their
judging, keyed by the best's tree and everything the judging read; stored by the harness when it keeps a
candidate, looked up before the candidate's outputs are judged."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from dit_ar_contract.classes import MILDEST, ChangeClass
from dit_ar_contract.config import QualityContract
from dit_ar_contract.digest import sha256_file
from quality_suite import audit, own_change
from quality_suite.assessment import QualityAssessment
from quality_suite.audit import AuditEvidence
from quality_suite.own_change import ParentOutputs

from ...state import best_outputs
from ...state.best_outputs import Lookup, OutputsKey, StoredOutputs
from ...state.session import Session
from ...worker.client import WorkerLauncher
from .generation import CandidateRun


def outputs_key(session: Session, tree: str) -> OutputsKey:
    """The key of outputs generated from `tree` (a tree digest of the mutable paths) in this session and lane."""
    lane = session.lane
    pointer = session.started.baselines.get(session.lane_id)
    settings = json.dumps(asdict(lane), sort_keys=True, default=str)
    return OutputsKey(tree=tree, lane_id=session.lane_id,
                      seed_key_sha256=hashlib.sha256(session.started.seed_key.encode()).hexdigest(),
                      steps=lane.steps, corpus_sha256=sha256_file(session.root / lane.corpus),
                      baseline_sha256=pointer.manifest_sha256 if pointer else "",
                      lane_sha256=hashlib.sha256(settings.encode()).hexdigest())


def enabled(session: Session) -> bool:
    return session.lane.performance.reuse and bool(session.record and session.record.seed_key)


@dataclass
class Reused:
    """The best's judging when it was reused (else None), and why it was or was not."""

    assessment: QualityAssessment | None = None
    note: str = ""
    by_class: bool = False  # reused under the same effective class alone (not the same classes and evidence)


def best_judging(session: Session, launcher: WorkerLauncher, best_root: Path | None, declared_class: str,
                 run: CandidateRun, whole_corpus: bool, baseline: AuditEvidence | None = None) -> Reused:
    """The best's stored judging for this run of the whole corpus when the lane reuses and the outputs are the
    best's bit for bit (judged_as_best; `baseline`: the baseline's audit evidence, for a judging under other
    declared and inherited classes)."""
    if best_root is None or not whole_corpus or not enabled(session):
        return Reused()
    best = session.best()
    found, why, by_class = _lookup(session, launcher.tree_digest(best_root), declared_class,
                                   best.effective_class if best else MILDEST.word, run, baseline)
    return Reused(found, why, by_class)


def judged_as_best(session: Session, best_tree: str, declared_class: str, inherited_class: str,
                   run: CandidateRun, baseline: AuditEvidence | None = None) -> tuple[QualityAssessment | None, str]:
    """The best's stored judging when the candidate's corpus outputs are the best's bit for bit and either its audit
    evidence and declared and inherited classes are the judging's, or (with the baseline's evidence) the audit gives
    this candidate, on its own evidence, the judging's effective class and approximate-outputs flag: every gate and
    test of the assessment reads only those, the outputs and the baseline's figures (not a quantization: its tests
    depend on the parent). Else None. The second value says why (shown in the run's record); the caller checks the
    own change against the best (`confirm_own_change`)."""
    found, why, _ = _lookup(session, best_tree, declared_class, inherited_class, run, baseline)
    return found, why


def _lookup(session: Session, best_tree: str, declared_class: str, inherited_class: str, run: CandidateRun,
            baseline: AuditEvidence | None) -> tuple[QualityAssessment | None, str, bool]:
    """judged_as_best's answer, and whether it reused the judging under the effective class alone."""
    found: Lookup = best_outputs.load(session.paths.dir, session.started.seed_key, outputs_key(session, best_tree))
    stored = found.stored
    if stored is None:
        return None, found.why, False
    if not best_outputs.identical(stored, run.outputs.images, run.outputs.latents):
        return None, "the outputs differ from the best's: judged in full", False
    judging = QualityAssessment.from_dict(stored.assessment)
    same_evidence = stored.evidence == run.evidence.as_dict()
    if same_evidence and judging.declared_class == declared_class and stored.inherited_class == inherited_class:
        return judging, "the outputs are the best's bit for bit: its judging reused", False
    same_class = same_effective_class(judging, declared_class, inherited_class, run, baseline)
    if same_class is None:
        return None, ("the classes differ from the best's judging: judged in full" if same_evidence else
                      "the audit evidence differs from the best's: judged in full"), False
    return same_class, ("the outputs are the best's bit for bit and the audit gives the candidate the judging's "
                        f"class {judging.effective_class}: its judging reused"), True


def confirm_own_change(found: Reused, declared_class: str, run: CandidateRun, parent: ParentOutputs | None,
                       quality: QualityContract, envelope: dict[str, float]) -> Reused:
    """A judging reused under the effective class alone (`Reused.by_class`) stands only where the candidate's own
    change against the best is exact with every case's check passed (quality_suite/own_change.py, on the outputs
    bit for bit and the candidate's own evidence); else the candidate is judged in full. A judging reused under
    the same classes and evidence stands as it is."""
    if found.assessment is None or parent is None or not found.by_class:
        return found
    own = own_change.judge(declared_class, run.outputs.images, run.outputs.latents, run.evidence, parent, quality,
                           envelope)
    if own.cls is ChangeClass.EXACT and all(c.passed for checks in own.checks.values() for c in checks):
        return found
    return Reused(None, f"the own change against the best is {own.cls.word}: judged in full")


def same_effective_class(judging: QualityAssessment, declared_class: str, inherited_class: str, run: CandidateRun,
                         baseline: AuditEvidence | None) -> QualityAssessment | None:
    """The best's judging as this candidate's (its declared class and the audit's reasons) when the audit gives the
    candidate, on its own evidence, the judging's effective class and approximate-outputs flag:
    every gate and test of the assessment reads only those, the outputs and the baseline's figures; None otherwise,
    and for a quantization (its tolerance claim is also shown against the parent, which differs)."""
    if baseline is None:
        return None
    fid = judging.fidelity
    same = bool(fid) and all(f.get("latent_max_abs") == 0 and f.get("psnr_db") == math.inf for f in fid.values())
    effective, reasons = audit.effective_class(declared_class, run.evidence, baseline, inherited_class, same)
    approx = audit.approximate_outputs(declared_class, run.evidence, baseline, inherited_class, same)
    if effective.word != judging.effective_class or approx != judging.approximate_outputs or \
            effective is ChangeClass.QUANTIZATION:
        return None
    return dataclasses.replace(judging, declared_class=ChangeClass.from_word(declared_class).word,
                               audit_reasons=tuple(reasons))


def store_kept(session: Session, tree: str, run: CandidateRun, assessment: QualityAssessment,
               inherited_class: str) -> None:
    """Store a kept candidate's corpus outputs and judging as the best's (the harness's own, from this run)."""
    best_outputs.store(session.paths.dir, session.started.seed_key, outputs_key(session, tree),
                       StoredOutputs(dict(run.outputs.images), dict(run.outputs.latents), run.evidence.as_dict(),
                                     assessment.as_dict(), inherited_class))
