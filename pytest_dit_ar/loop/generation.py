"""Generate a frozen corpus through a worker and collect the outputs per case."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from tqdm import tqdm

from dit_ar_contract.errors import CandidateCrash
from quality_suite.audit import AuditEvidence, PipelineInspection
from quality_suite.corpora import Case, batches

from ..worker.client import WorkerProcess


@dataclass
class CorpusOutputs:
    """Images [3,H,W] and latents [C,h,w] per case id, plus what the worker reported on the way."""

    images: dict[str, torch.Tensor] = field(default_factory=dict)
    latents: dict[str, torch.Tensor] = field(default_factory=dict)
    denoiser_rows_per_image: float | None = None
    activation_dtypes: list[str] = field(default_factory=list)
    memory: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


def generate_corpus(worker: WorkerProcess, cases: list[Case], batch: int, *, perturb: dict | None = None,
                    progress: bool = False, desc: str = "generate") -> CorpusOutputs:
    """Run every case in batches; NaN/Inf or a failing worker raises CandidateCrash."""
    out = CorpusOutputs()
    rows: list[float] = []
    groups = batches(cases, batch)
    with tempfile.TemporaryDirectory(prefix="dit-ar-gen-") as tmp:
        for i, group in enumerate(tqdm(groups, desc=desc, disable=not progress, leave=False)):
            path = Path(tmp) / f"batch{i}.safetensors"
            reply, seconds = worker.timed_request(
                "generate", requests=[list(c.request) for c in group], save=str(path),
                perturb=perturb, audit_dtypes=(i == 0))
            out.seconds += seconds
            if not reply["finite"]:
                bad = [c.id for c in group]
                raise CandidateCrash(f"{worker.side} produced NaN/Inf outputs in cases {bad}")
            tensors = load_file(str(path))
            for j, case in enumerate(group):
                out.images[case.id] = tensors["images"][j].clone()
                out.latents[case.id] = tensors["latents"][j].clone()
            rows.append(reply["denoiser_rows_per_image"])
            if i == 0:
                out.activation_dtypes = reply.get("activation_dtypes", [])
            out.memory = _max_memory(out.memory, reply.get("memory", {}))
    out.denoiser_rows_per_image = min(rows) if rows else None
    return out


def _max_memory(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: max(a.get(k, 0.0), b.get(k, 0.0)) for k in set(a) | set(b)}


def audit_evidence(build_reply: dict[str, Any], outputs: CorpusOutputs) -> AuditEvidence:
    """The audit evidence of one side: the worker's inspection of the built pipeline and the generation's."""
    return AuditEvidence(PipelineInspection.from_dict(build_reply.get("audit")), tuple(outputs.activation_dtypes),
                         outputs.denoiser_rows_per_image)
