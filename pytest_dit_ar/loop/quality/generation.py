"""Generate a frozen corpus through a worker and collect the outputs per case.

The worker cannot tell a corpus case from a timed round: every request is a full batch, the seeds are
the corpus seeds keyed with the session's secret (so they look like any fresh seed, and a model that
knows the published corpus cannot recognise them), and the outputs come back through the same path."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

from quality_suite.audit import AuditEvidence, PipelineInspection
from quality_suite.corpora import Case, batches

from ...state.session import Session
from ...worker.client import WorkerProcess
from ..workers.live import Live


@dataclass
class CorpusOutputs:
    """Images [3,H,W] and latents [C,h,w] per case id, plus what the worker reported on the way."""

    images: dict[str, torch.Tensor] = field(default_factory=dict)
    latents: dict[str, torch.Tensor] = field(default_factory=dict)
    denoiser_rows_per_image: float | None = None
    denoiser_rows_unseen: bool = False  # some generate made outputs without a forward call the hook saw
    memory: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    first_s: float = 0.0  # the first generate (a compiled model compiles here)
    times: list[float] = field(default_factory=list)  # each generate's round trip (the harness's clock)


@dataclass(frozen=True)
class CandidateRun:
    """What the quality run of the candidate produced."""

    build_s: float
    outputs: CorpusOutputs
    evidence: AuditEvidence


def padded(group: list[Case], batch: int, key: str, rng: random.Random) -> list[list[Any]]:
    """The group's keyed requests, padded to a full batch with fresh requests (outputs dropped)."""
    requests = [list(c.keyed_request(key)) for c in group]
    while len(requests) < batch:
        requests.append([rng.choice(group).prompt, rng.randrange(2**31)])
    return requests


MAX_GAP_S = 2.0  # the longest pause one gap of timed_like_gaps may add


def timed_like_gaps(round_s: float | None, rng: random.Random | None = None) -> Iterator[float]:
    """Pauses between a corpus run's requests that give the worker the gaps it sees in timed rounds.

    In balanced rounds (BC, CB, BC, ...) a side's requests come in pairs: one right after the other, then a
    wait of about two of the other side's rounds. A worker frozen between requests still sees those gaps in
    its own clock; the corpus run makes the same pattern (0, then 2 x `round_s`, jittered by 10%, at most
    MAX_GAP_S), so the gaps alone do not tell it the quality run from the timed rounds
    (docs/design/sandbox-and-security.md)."""
    rng = rng or random.SystemRandom()
    wait = round_s if round_s is not None and round_s > 0 else 0.0
    i = 0
    while True:
        yield min(2.0 * wait * rng.uniform(0.9, 1.1), MAX_GAP_S) if i % 2 == 1 else 0.0
        i += 1


def quality_gaps(session: Session) -> Iterator[float] | None:
    """The timed rounds' gaps for the quality run: two of the best's rounds (its recorded median); None when the
    lane's `performance.quality_gaps` is off."""
    if not session.lane.performance.quality_gaps:
        return None
    best = session.best()
    median_ms = best.measurements.median_ms if best is not None else None
    return timed_like_gaps(median_ms / 1000.0 if median_ms else None)


def generate_corpus(worker: WorkerProcess, cases: list[Case], batch: int, key: str, resolution: int, *,
                    perturb: dict | None = None, progress: bool = False, desc: str = "generate",
                    live: Live | None = None, gaps: Iterator[float] | None = None) -> CorpusOutputs:
    """Run every case in full batches; NaN/Inf, a malformed output or a failing worker raises CandidateCrash.
    With `live`, the phase shows there (a bar on a terminal, one line in a pipe) instead of tqdm on stderr.
    With `gaps`, the harness waits that long (the worker frozen) before each request after the first."""
    out = CorpusOutputs()
    rows: list[float] = []
    rng = random.SystemRandom()
    bar = live.bar(desc, len(cases), "case") if live is not None else \
        tqdm(total=len(cases), desc=desc, disable=not progress, leave=False)
    for i, group in enumerate(batches(cases, batch)):
        if gaps is not None and i > 0:
            time.sleep(next(gaps))
        got = worker.generate(padded(group, batch, key, rng), perturb, resolution)
        out.first_s = out.first_s or got.seconds
        bar.update(len(group))
        out.seconds += got.seconds
        out.times.append(got.seconds)
        for j, case in enumerate(group):
            out.images[case.id] = got.images[j].clone()
            out.latents[case.id] = got.latents[j].clone()
        if got.rows_per_image is not None:
            rows.append(float(got.rows_per_image))
        out.memory = {k: max(out.memory.get(k, 0.0), v) for k, v in {**out.memory, **got.memory}.items()}
    bar.close()
    out.denoiser_rows_per_image, out.denoiser_rows_unseen = counted_rows(rows)
    return out


def counted_rows(rows: list[float]) -> tuple[float | None, bool]:
    """The corpus run's denoiser rows per image (the fewest of any generate: a step cut on some requests is
    seen) and whether the count is blind. A generate with outputs but no row seen ran its denoiser without
    calling it or any of its entry modules (worker/rows.py; a CUDA graph captured by hand replays its passes,
    the capturing generate alone shows the warm-up and capture calls): then no step count is claimed and the
    outputs alone judge it."""
    if any(r == 0 for r in rows):
        return None, True
    return (min(rows) if rows else None), False


def audit_evidence(worker: WorkerProcess, build_reply: dict[str, Any], outputs: CorpusOutputs, cases: list[Case],
                   batch: int, key: str) -> AuditEvidence:
    """The audit evidence of one side: the worker's inspection of the built pipeline, the dtypes its modules
    produce in one more generate, and the denoiser rows of the corpus run. All three come from code running
    in the worker's process: advisory (the class it implies is applied), never the only guard (see
    docs/design/sandbox-and-security.md)."""
    dtypes = worker.request("activation_dtypes", requests=padded(cases[:batch], batch, key, random.Random(0)))
    return AuditEvidence(PipelineInspection.from_dict(build_reply.get("audit")),
                         tuple(dtypes.get("activation_dtypes", ())), outputs.denoiser_rows_per_image,
                         outputs.denoiser_rows_unseen)
