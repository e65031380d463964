"""What the timed comparison of one experiment is given besides the two trees: the per-round output check, the
roofline floor, the session's offset bound against the current best and, afterwards, the pooled spread.

Pure functions of the session's records and the quality result; `Evidence.performance` puts them into the
`MeasurementPlan` that `measurement.measure` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dit_ar_contract.classes import ChangeClass
from perf_suite.roofline import floor_ms
from perf_suite.sequential import OffsetBound
from quality_suite import gates
from quality_suite.assessment import QualityAssessment
from quality_suite.audit import AuditEvidence
from quality_suite.metrics import fidelity_batch

from ...state.baseline import BaselineSummary
from ...state.noise import read_noise, record_spread
from ...state.perf_record import PerfRecord
from ...state.session import Session
from ...worker.client import Generated
from .measurement_plan import RoundCheck

OUTSIDE_SHARE = 0.05  # of the timed cases, how many may leave the class's gate for the next looser one (>= 1)
LOOSER = {ChangeClass.EXACT: ChangeClass.NUMERICAL, ChangeClass.NUMERICAL: ChangeClass.APPROXIMATE,
          ChangeClass.QUANTIZATION: ChangeClass.APPROXIMATE}  # an approximate change has no looser gate


FEWER_ROWS_SHARE = 0.25  # of the timed rounds, how many may run fewer denoiser rows than the whole quality run (>= 1)


@dataclass
class _Tally:
    cases: int = 0  # timed cases judged so far in this experiment
    outside: int = 0  # of them, cases outside the class's gate but inside the next looser one
    rounds: int = 0  # timed rounds whose denoiser rows were seen
    fewer: int = 0  # of them, rounds that ran fewer rows per image than any generate of the quality run

    def allowed(self) -> int:
        return max(1, int(OUTSIDE_SHARE * self.cases))


def fewer_rows(tally: _Tally, judged_rows: float | None, timed_rows: float | None) -> list[str]:
    """The timed rounds' denoiser rows per image against the quality run's (the fewest of its generates; both
    counted by the harness's hook, worker/rows.py): a candidate that cuts steps only when it is timed runs fewer
    in every such round. A round may run fewer (a sampler that adapts its steps to the request can), at most
    FEWER_ROWS_SHARE of them (at least one); more is the timed work not being the judged work. No count (a graph
    replay, several GPUs) is no finding: the outputs alone judge it."""
    if judged_rows is None or not timed_rows:
        return []
    tally.rounds += 1
    if timed_rows >= judged_rows * (1 - 1e-9):
        return []
    tally.fewer += 1
    if tally.fewer <= max(1, int(FEWER_ROWS_SHARE * tally.rounds)):
        return []
    return [f"{timed_rows:g} denoiser rows per image in a timed round, where every generate of the judged quality "
            f"run ran at least {judged_rows:g} ({tally.fewer} of {tally.rounds} timed rounds ran fewer): the program "
            "timed is not the program judged"]


def round_check(quality: QualityAssessment, envelope: dict[str, float], session: Session,
                judged_rows: float | None = None) -> RoundCheck:
    """Candidate vs best outputs of the same timed requests under the effective class's per-case gate (with
    the quality gate's floors: the same `approximate_outputs` rule).

    One departure: the corpus's cases are the ones the class's gate was
    calibrated and passed on; a timed request is a fresh one whose trajectory may amplify a change's error more
    (a demo's batched guidance, exact: 3.8e-5 latent rel. L2 on one timed case against a 1e-5 limit, all 40
    corpus cases within 7.5e-7; its bf16 cast: 0.084 against 0.05, corpus within 0.018). So a timed case may
    leave the class's gate if it stays inside the next looser one (LOOSER), for at most OUTSIDE_SHARE of the
    timed cases so far (at least one); a change that differs only when timed differs on most of its rounds
    and still fails. An approximate change has no looser gate: a timed case outside its floors gets the same
    allowance with nothing behind it (a demo's half steps: one fresh case at 14.3 dB against the 15 dB floor, its
    160 corpus cases at 24.6 dB or more); its quality is the corpus tests' to decide. Each timed round's denoiser
    rows are also held against the quality run's (`fewer_rows`)."""
    cls = ChangeClass.from_word(quality.effective_class)
    approx = quality.approximate_outputs
    contract = session.lane.quality
    tally = _Tally()

    def judged(i: int, fid: dict[str, float]) -> list[str]:
        tally.cases += 1
        bad = [c for c in gates.case_checks(cls, f"timed-{i}", fid, contract, envelope, approximate_outputs=approx)
               if not c.passed]
        if not bad:
            return []
        hard = [c for c in gates.case_checks(LOOSER[cls], f"timed-{i}", fid, contract, envelope)
                if not c.passed] if cls in LOOSER else []
        tally.outside += 1
        if hard or tally.outside > tally.allowed():
            why = f" ({tally.outside} of {tally.cases} timed cases outside the {cls.value} gate, " \
                  f"{tally.allowed()} allowed)"
            return [c.describe() + why for c in (hard or bad)]
        return []

    def check(cand: Generated, best: Generated) -> list[str]:
        n = len(cand.images)
        fids = fidelity_batch([cand.images[i] for i in range(n)], [best.images[i] for i in range(n)],
                              [cand.latents[i] for i in range(n)], [best.latents[i] for i in range(n)])
        failures = [f for i, fid in enumerate(fids) for f in judged(i, fid)]
        return [f"timed outputs against the best's for the same request: {f}" for f in failures[:3]] + \
            fewer_rows(tally, judged_rows, cand.rows_per_image)

    return check


def roofline_ms(baseline: BaselineSummary, cand_rows: float | None, gpus: int, effective_class: str) -> float | None:
    """The fastest a batch could possibly run on this device, from the baseline's FLOP count and peak
    (scaled by the candidate's denoiser rows when its quality run measured them; the peak is every GPU
    the worker holds)."""
    roof = baseline.roofline
    base_rows = roof.flops_rows_per_image or AuditEvidence.from_dict(baseline.evidence).denoiser_rows_per_image
    peak = roof.device_peak_tflops * gpus if roof.device_peak_tflops else roof.device_peak_tflops
    return floor_ms(roof.flops_per_batch, peak, roof.peak_measured,
                    base_rows, cand_rows, effective_class)


def best_commit(session: Session) -> str | None:
    best = session.best()
    return best.commit if best else None


def offset_bound(session: Session) -> OffsetBound:
    """B for this experiment: the session's noise state against the current best (state.noise)."""
    lane = session.lane
    noise = read_noise(session.paths, session.lane_id).against(best_commit(session))
    return noise.bound(lane.performance, lane.device)


def learn_noise(session: Session, run_dir: Path, perf: PerfRecord) -> None:
    """Pool this experiment's between-pair spread against the same best (a faithful timing only)."""
    if perf.spread is not None and not perf.unfaithful and session.record is not None:
        record_spread(session.paths, session.lane_id, best_commit(session), run_dir.name, perf.spread)
