"""The candidate's own change, judged against its parent (the current best) as well as against the original baseline.

Against the original baseline a candidate is judged at its *chain's* class: the stricter of its own class and the
best's, since whatever the kept commits changed is part of every later candidate's difference. That comparison
alone cannot see what the candidate's own change does once the best is approximate: a change declared exact on top
of a step cut would be judged as an approximation and nothing would check that it is exact. So the change from the
best to the candidate gets a class of its own, from its evidence against the best's pipeline (the declared class,
raised by what the audit finds; never by the best's own class), and the gate of that class against the best's
outputs:

* exact -- every case within the exact gate's limits (the baseline's noise envelope times its multiple, the same
  limits the exact gate applies against the baseline) against the best's outputs;
* numerical -- every case within the numerical fidelity floors against the best's outputs;
* approximate and quantization -- no per-case fidelity check against the best: their task-score tests judge them
  (a quantization against the parent at the resolution: quality_suite/task_tests.py).

Where the best is the original baseline the two comparisons are one, and only the baseline's is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dit_ar_contract.classes import ChangeClass
from dit_ar_contract.config import QualityContract

from . import audit, gates
from .artifacts import per_case_fidelity

AGAINST_BEST = "against the best's outputs"


@dataclass(frozen=True)
class ParentOutputs:
    """The current best's corpus outputs (generated and audited by the harness) and its class against the
    original baseline."""

    images: Mapping[str, object]
    latents: Mapping[str, object]
    evidence: audit.AuditEvidence
    effective_class: str


@dataclass(frozen=True)
class OwnChange:
    """The class of the change from the best to the candidate, why, and its per-case checks against the best."""

    cls: ChangeClass
    reasons: tuple[str, ...]
    checks: Mapping[str, tuple[gates.Check, ...]]  # by case id

    def failures(self) -> list[gates.Check]:
        return [c for case in self.checks.values() for c in case if not c.passed]


def own_class(declared: ChangeClass | str, candidate: audit.AuditEvidence, parent: ParentOutputs,
              identical: bool) -> tuple[ChangeClass, list[str]]:
    """The declared class raised by what the audit finds against the best's pipeline (the best's own class,
    which concerns the chain, is left out)."""
    return audit.effective_class(declared, candidate, parent.evidence, ChangeClass.EXACT, identical)


def _relabelled(check: gates.Check, cls: ChangeClass) -> gates.Check:
    return gates.Check(f"{check.name} vs best", check.passed, check.value, check.threshold, check.case,
                       f"{AGAINST_BEST} (the change's own class: {cls})", check.op)


def judge(declared: ChangeClass | str, cand_images: Mapping, cand_latents: Mapping,
          cand_evidence: audit.AuditEvidence, parent: ParentOutputs, quality: QualityContract,
          envelope: dict[str, float]) -> OwnChange:
    """The own change's class and, for an exact or numerical one, every case's checks against the best."""
    fid = per_case_fidelity(dict(cand_images), dict(cand_latents), dict(parent.images), dict(parent.latents))
    identical = len(fid) > 0 and all(f["latent_max_abs"] == 0 for f in fid.values())
    cls, reasons = own_class(declared, cand_evidence, parent, identical)
    if cls not in (ChangeClass.EXACT, ChangeClass.NUMERICAL):
        return OwnChange(cls, tuple(reasons), {})
    checks = {cid: tuple(_relabelled(c, cls) for c in gates.case_checks(cls, cid, f, quality, envelope))
              for cid, f in fid.items()}
    return OwnChange(cls, tuple(reasons), checks)


def class_line(chain: str, own: str) -> str:
    """'class=approximate (own change: exact against the best)' -- both comparisons named when they differ."""
    if not own:
        return f"class={chain}"
    return f"class={chain} against the original baseline; own change {own} against the best"
