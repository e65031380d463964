"""The holdout corpus of a lane: frozen, checksummed cases that only `dit-ar revalidate` judges.

Every quality gate of `experiment` uses the lane's one visible corpus, whose failing cases the agent reads in
`status`; a chain of changes tuned to pass exactly those cases can fail elsewhere. The holdout is a second frozen
corpus (`holdout_corpus` of the lane, checksummed in the same checksums.json, hidden from every sandbox like the
main corpus) whose baseline outputs are generated at baseline time with the same keyed seeds, and stored in the
baseline's folder (under its manifest). `revalidate` generates the best's outputs for the same cases in a fresh
worker and judges each case against the baseline's with the per-case gate of the best's effective class (the
corpus-level task metrics are the main corpus's business).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dit_ar_contract.classes import ChangeClass
from quality_suite import gates
from quality_suite.artifacts import load_cases, save_case
from quality_suite.corpora import Case, load_corpus
from quality_suite.metrics import fidelity_batch

from ...state.session import Session
from ...worker.client import WorkerProcess
from .generation import CorpusOutputs, generate_corpus

HOLDOUT_DIR = "holdout"


def holdout_cases(session: Session) -> list[Case] | None:
    """The lane's holdout cases (checksum verified), None when the lane has no holdout."""
    name = session.lane.holdout_corpus
    return load_corpus(session.root / name) if name else None


def holdout_dir(baseline_dir: Path) -> Path:
    return baseline_dir / HOLDOUT_DIR


def generate(worker: WorkerProcess, session: Session, cases: list[Case], desc: str = "holdout",
             live: Any = None) -> CorpusOutputs:
    """The holdout cases through a built worker, with the session's keyed seeds (like the main corpus); `live`
    shows the phase on the terminal (loop.workers.live.Live)."""
    lane = session.lane
    return generate_corpus(worker, cases, lane.batch, session.started.seed_key, lane.resolution, desc=desc,
                           live=live)


def save(baseline_dir: Path, cases: list[Case], outputs: CorpusOutputs) -> None:
    for case in cases:
        save_case(holdout_dir(baseline_dir), case.id, outputs.images[case.id], outputs.latents[case.id])


@dataclass(frozen=True)
class HoldoutResult:
    """The best's outputs on the holdout against the baseline's, under one class's per-case gate."""

    effective_class: str
    cases: int
    passed: int
    failures: tuple[str, ...] = field(default_factory=tuple)
    note: str = ""  # why nothing was judged (no holdout in the lane, or none in the baseline)

    @property
    def ok(self) -> bool | None:
        return None if self.note else self.passed == self.cases

    def headline(self) -> str:
        if self.note:
            return f"holdout: not judged ({self.note})"
        verdict = "passes" if self.ok else "FAILS"
        return (f"holdout: {verdict} {self.passed}/{self.cases} cases under the {self.effective_class} gate"
                + (f"; {self.failures[0]}" if self.failures else ""))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "failures": list(self.failures), "ok": self.ok}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HoldoutResult:
        return cls(data.get("effective_class", ""), int(data.get("cases", 0)), int(data.get("passed", 0)),
                   tuple(data.get("failures") or ()), data.get("note", ""))


def not_judged(effective_class: str, note: str) -> HoldoutResult:
    return HoldoutResult(effective_class, 0, 0, (), note)


def judge(session: Session, cases: list[Case], outputs: CorpusOutputs, effective_class: str,
          envelope: dict[str, float]) -> HoldoutResult:
    """Each holdout case of `outputs` against the baseline's output of the same case."""
    folder = holdout_dir(session.baseline_dir)
    if not folder.is_dir():
        return not_judged(effective_class, "the baseline has no holdout outputs: it was taken before the lane had "
                                           "a holdout corpus; a new session's baseline will have them")
    images, latents = load_cases(folder, cases)
    ids = [c.id for c in cases]
    fids = fidelity_batch([outputs.images[i] for i in ids], [images[i] for i in ids],
                          [outputs.latents[i] for i in ids], [latents[i] for i in ids])
    approx = ChangeClass.from_word(effective_class).judged_on_the_task
    failures, passed = [], 0
    for case_id, fid in zip(ids, fids):
        bad = [c.describe() for c in gates.case_checks(effective_class, case_id, fid, session.lane.quality, envelope,
                                                       approximate_outputs=approx) if not c.passed]
        passed += not bad
        failures += bad[:1]
    return HoldoutResult(effective_class, len(ids), passed, tuple(failures[:10]))
