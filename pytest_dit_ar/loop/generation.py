"""Generate a frozen corpus through a worker and collect the outputs per case.

The worker cannot tell a corpus case from a timed round: every request is a full batch, the seeds are
the corpus seeds keyed with the session's secret (so they look like any fresh seed, and a model that
knows the published corpus cannot recognise them), and the outputs come back through the same path."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

from quality_suite.audit import AuditEvidence, PipelineInspection
from quality_suite.corpora import Case, batches

from ..worker.client import WorkerProcess
from .live import Live


@dataclass
class CorpusOutputs:
    """Images [3,H,W] and latents [C,h,w] per case id, plus what the worker reported on the way."""

    images: dict[str, torch.Tensor] = field(default_factory=dict)
    latents: dict[str, torch.Tensor] = field(default_factory=dict)
    denoiser_rows_per_image: float | None = None
    memory: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


def padded(group: list[Case], batch: int, key: str, rng: random.Random) -> list[list[Any]]:
    """The group's keyed requests, padded to a full batch with fresh requests (outputs dropped)."""
    requests = [list(c.keyed_request(key)) for c in group]
    while len(requests) < batch:
        requests.append([rng.choice(group).prompt, rng.randrange(2**31)])
    return requests


def generate_corpus(worker: WorkerProcess, cases: list[Case], batch: int, key: str, resolution: int, *,
                    perturb: dict | None = None, progress: bool = False, desc: str = "generate",
                    live: Live | None = None) -> CorpusOutputs:
    """Run every case in full batches; NaN/Inf, a malformed output or a failing worker raises CandidateCrash.
    With `live`, the phase shows there (a bar on a terminal, one line in a pipe) instead of tqdm on stderr."""
    out = CorpusOutputs()
    rows: list[float] = []
    rng = random.SystemRandom()
    bar = live.bar(desc, len(cases), "case") if live is not None else \
        tqdm(total=len(cases), desc=desc, disable=not progress, leave=False)
    for group in batches(cases, batch):
        got = worker.generate(padded(group, batch, key, rng), perturb, resolution)
        bar.update(len(group))
        out.seconds += got.seconds
        for j, case in enumerate(group):
            out.images[case.id] = got.images[j].clone()
            out.latents[case.id] = got.latents[j].clone()
        if got.rows_per_image is not None:
            rows.append(float(got.rows_per_image))
        out.memory = {k: max(out.memory.get(k, 0.0), v) for k, v in {**out.memory, **got.memory}.items()}
    bar.close()
    out.denoiser_rows_per_image = min(rows) if rows else None
    return out


def audit_evidence(worker: WorkerProcess, build_reply: dict[str, Any], outputs: CorpusOutputs, cases: list[Case],
                   batch: int, key: str) -> AuditEvidence:
    """The audit evidence of one side: the worker's inspection of the built pipeline, the dtypes its modules
    produce in one more generate, and the denoiser rows of the corpus run. All three come from code running
    in the worker's process: advisory (the class it implies is applied), never the only guard (see
    docs/security.md)."""
    dtypes = worker.request("activation_dtypes", requests=padded(cases[:batch], batch, key, random.Random(0)))
    return AuditEvidence(PipelineInspection.from_dict(build_reply.get("audit")),
                         tuple(dtypes.get("activation_dtypes", ())), outputs.denoiser_rows_per_image)
