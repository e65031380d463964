"""The best's corpus outputs, for judging a candidate's own change against its parent
(quality_suite/own_change.py): the outputs the harness stored when it kept the best (state/best_outputs.py), else
the best's tree run again on the corpus by a harness worker. None while the best is the original baseline: then
the change's own comparison is the baseline's, made anyway."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dit_ar_contract.config import WorkloadSpec
from dit_ar_contract.errors import CandidateCrash, Refused
from quality_suite.audit import AuditEvidence
from quality_suite.corpora import Case
from quality_suite.own_change import ParentOutputs

from ...state import best_outputs
from ...state.runs import RunPaths
from ...state.session import Session
from ...worker.client import WorkerLauncher
from ..workers.live import Live
from .generation import audit_evidence, generate_corpus
from .reuse import enabled, outputs_key


def parent_outputs(session: Session, launcher: WorkerLauncher, best_root: Path | None, cases: list[Case],
                   run: RunPaths, spec: Callable[[Path], WorkloadSpec], live: Live | None) -> ParentOutputs | None:
    """The best's outputs of `cases` and its class (None: the best is the original baseline, or there is no
    best tree to run)."""
    best, record = session.best(), session.record
    if best is None or best_root is None or record is None or best.commit == record.baseline_commit:
        return None
    if enabled(session):
        found = best_outputs.load(session.paths.dir, session.started.seed_key,
                                  outputs_key(session, launcher.tree_digest(best_root)))
        stored = found.stored
        if stored is not None and all(c.id in stored.images for c in cases):
            return ParentOutputs(stored.images, stored.latents, AuditEvidence.from_dict(stored.evidence),
                                 best.effective_class)
    return generated(session, launcher, best_root, cases, run, spec(best_root), live, best.effective_class)


def generated(session: Session, launcher: WorkerLauncher, best_root: Path, cases: list[Case], run: RunPaths,
              spec: WorkloadSpec, live: Live | None, effective_class: str) -> ParentOutputs:
    """The best's tree built and run on `cases` in a harness worker, audited as a candidate is. The best was
    kept by this harness: its failure here is the harness's problem, refused, never the candidate's crash."""
    lane = session.lane
    key = session.started.seed_key
    try:
        with launcher.worker("best", best_root, run.worker_log("best", "own-change")) as worker:
            build = worker.request("build", spec=spec)
            outputs = generate_corpus(worker, cases, lane.batch, key, lane.resolution,
                                      desc="quality: the best's corpus (the own change's reference)", live=live)
            evidence = audit_evidence(worker, build, outputs, cases, lane.batch, key)
    except CandidateCrash as exc:
        raise Refused(f"the best's worker failed while generating its corpus outputs, the reference of the "
                      f"candidate's own change ({exc}); nothing was recorded: run `dit-ar revalidate` to check the "
                      f"best, then the experiment again") from exc
    return ParentOutputs(outputs.images, outputs.latents, evidence, effective_class)
