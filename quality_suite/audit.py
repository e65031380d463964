"""Classification audit: what the built pipeline really is, and the class that evidence implies.

`inspect_pipeline` runs inside the worker on the built pipeline; `effective_class` runs in the harness
and compares the candidate's evidence with the baseline's. The stricter (higher) class wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dit_ar_contract.classes import ChangeClass
from dit_ar_contract.classes import approximate_outputs as _approximate

LOW_BIT_DTYPES = ("int8", "uint8", "int4", "uint4", "qint8", "quint8", "qint32", "quint4x2",
                  "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float4_e2m1fn_x2")
QUANT_NAME_HINTS = ("quantiz", "qlinear", "int8", "int4", "fp8", "float8", "nf4", "bnb", "bitsandbytes",
                    "torchao", "affinequantized", "linear8bit", "linear4bit", "packed")
FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
PARAMS_KEPT = 0.6  # below this fraction of the baseline's visible parameter elements, weights were repacked


@dataclass(frozen=True)
class PipelineInspection:
    """What `inspect_pipeline` found in a built pipeline (elements per dtype, bytes, quantized types)."""

    param_dtypes: dict[str, int] = field(default_factory=dict)
    weight_bytes: int = 0
    quantized_types: tuple[str, ...] = ()
    tensor_subclasses: tuple[str, ...] = ()
    modules: int = 0
    components: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> PipelineInspection:
        data = data or {}
        return cls(dict(data.get("param_dtypes", {})), int(data.get("weight_bytes", 0)),
                   tuple(data.get("quantized_types", ())), tuple(data.get("tensor_subclasses", ())),
                   int(data.get("modules", 0)), tuple(data.get("components", ())))

    def as_dict(self) -> dict[str, Any]:
        return {"param_dtypes": self.param_dtypes, "weight_bytes": self.weight_bytes,
                "quantized_types": list(self.quantized_types), "tensor_subclasses": list(self.tensor_subclasses),
                "modules": self.modules, "components": list(self.components)}


@dataclass(frozen=True)
class AuditEvidence:
    """The evidence of one side the audit compares: the built pipeline, activation dtypes, denoiser rows."""

    pipeline: PipelineInspection = field(default_factory=PipelineInspection)
    activation_dtypes: tuple[str, ...] = ()
    denoiser_rows_per_image: float | None = None
    denoiser_rows_unseen: bool = False  # a generate ran its denoiser unseen (graph replays): no row count

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> AuditEvidence:
        data = data or {}
        return cls(PipelineInspection.from_dict(data.get("audit")), tuple(data.get("activation_dtypes", ())),
                   data.get("denoiser_rows_per_image"), bool(data.get("denoiser_rows_unseen", False)))

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape stored in baseline.json (`audit` is the inspection)."""
        return {"audit": self.pipeline.as_dict(), "activation_dtypes": list(self.activation_dtypes),
                "denoiser_rows_per_image": self.denoiser_rows_per_image,
                "denoiser_rows_unseen": self.denoiser_rows_unseen}


def _dtype(t: Any) -> str:
    return str(t.dtype).replace("torch.", "")


def _looks_quantized(obj: Any) -> bool:
    cls = type(obj)
    text = f"{cls.__module__}.{cls.__qualname__}".lower()
    return any(h in text for h in QUANT_NAME_HINTS) or "torch.ao.nn.quantized" in cls.__module__


def inspect_pipeline(pipe: Any) -> dict[str, Any]:
    """Parameter and buffer dtypes (elements per dtype), weight bytes and quantized module/tensor types."""
    import torch

    dtypes: dict[str, int] = {}
    weight_bytes = 0
    quantized: set[str] = set()
    subclasses: set[str] = set()
    modules = 0
    components = getattr(pipe, "components", {}) or {}
    for comp in components.values():
        if not isinstance(comp, torch.nn.Module):
            continue
        for mod in comp.modules():
            modules += 1
            if _looks_quantized(mod):
                quantized.add(f"{type(mod).__module__}.{type(mod).__qualname__}")
        for tensor in list(comp.parameters()) + list(comp.buffers()):
            data = tensor.data if isinstance(tensor, torch.nn.Parameter) else tensor
            dt = _dtype(data)
            dtypes[dt] = dtypes.get(dt, 0) + data.numel()
            if not tensor.is_meta:
                weight_bytes += data.numel() * data.element_size()
            if type(data) not in (torch.Tensor, torch.nn.Parameter):
                subclasses.add(f"{type(data).__module__}.{type(data).__qualname__}")
                if _looks_quantized(data):
                    quantized.add(f"{type(data).__module__}.{type(data).__qualname__}")
    return {"param_dtypes": dtypes, "weight_bytes": weight_bytes, "quantized_types": sorted(quantized),
            "tensor_subclasses": sorted(subclasses), "modules": modules,
            "components": sorted(k for k, v in components.items() if isinstance(v, torch.nn.Module))}


def _storage_reasons(cand: PipelineInspection, base: PipelineInspection) -> list[str]:
    """Weights stored below 16 bits per element, or parameters gone into packed/opaque storage."""
    c_elems = sum(cand.param_dtypes.values())
    b_elems = sum(base.param_dtypes.values())
    c_bits = 8 * cand.weight_bytes / c_elems if c_elems else math.inf
    b_bits = 8 * base.weight_bytes / b_elems if b_elems else math.inf
    reasons = []
    if c_bits < min(16.0, b_bits) - 1e-9:
        reasons.append(f"weights average {c_bits:.1f} bits per element (below 16 and the baseline's)")
    if b_elems and c_elems < PARAMS_KEPT * b_elems:
        reasons.append(f"visible parameters fell to {c_elems / b_elems:.0%} of the baseline's "
                       "(weights moved into packed/opaque storage or removed)")
    return reasons


def findings(candidate: AuditEvidence, baseline: AuditEvidence,
             identical: bool = False) -> list[tuple[ChangeClass, str]]:
    """(class, reason) for every way the candidate's evidence departs from the baseline's. `identical`: every
    corpus case's outputs are bit-identical to the baseline's (latents and images), so fewer denoiser rows
    removed redundant passes, not sampling steps: reported, no class implied."""
    found: list[tuple[ChangeClass, str]] = []
    c_audit, b_audit = candidate.pipeline, baseline.pipeline
    c_dt, b_dt = set(c_audit.param_dtypes), set(b_audit.param_dtypes)
    c_act, b_act = set(candidate.activation_dtypes), set(baseline.activation_dtypes)

    low_bit = sorted((c_dt | c_act) & set(LOW_BIT_DTYPES) - (b_dt | b_act))
    new_quant = sorted(set(c_audit.quantized_types) - set(b_audit.quantized_types))
    if low_bit:
        found.append((ChangeClass.QUANTIZATION, f"low-bit dtypes {low_bit} that the baseline does not use"))
    if new_quant:
        found.append((ChangeClass.QUANTIZATION,
                      f"quantized module/tensor types {new_quant} that the baseline does not use"))
    found += [(ChangeClass.QUANTIZATION, reason) for reason in _storage_reasons(c_audit, b_audit)]

    new_float = sorted((c_dt | c_act) & set(FLOAT_DTYPES) - (b_dt | b_act))
    if new_float:
        found.append((ChangeClass.NUMERICAL, f"float dtypes {new_float} appear that the baseline does not use"))

    b_rows, c_rows = baseline.denoiser_rows_per_image, candidate.denoiser_rows_per_image
    if b_rows and c_rows is not None and c_rows < b_rows - 1e-9:
        fell = f"denoiser evaluations per image fell from {b_rows:g} to {c_rows:g}"
        found.append((ChangeClass.EXACT, f"{fell}, with outputs bit-identical to the baseline's (redundant passes "
                                         "removed, not steps)") if identical else (ChangeClass.APPROXIMATE, fell))
    if candidate.denoiser_rows_unseen:  # reported, no class implied: the outputs' gates judge the step count
        found.append((ChangeClass.EXACT, "the denoiser ran unseen on some generates (no call to it or to its "
                                         "entry modules: a replayed CUDA graph, or a forward that calls none of "
                                         "them), so its evaluations were not counted"))
    return found


def effective_class(declared: ChangeClass | str, candidate: AuditEvidence, baseline: AuditEvidence,
                    inherited: ChangeClass | str = ChangeClass.EXACT,
                    identical: bool = False) -> tuple[ChangeClass, list[str]]:
    """The class the evidence supports, never milder than the declared one, and the reasons.

    `inherited` is the effective class of the current best: quality is judged against the original
    baseline, so whatever the kept commits changed is part of every later candidate's difference.
    """
    cls, reasons = ChangeClass.from_word(declared), []
    inherited = ChangeClass.from_word(inherited)
    for implied, reason in findings(candidate, baseline, identical):
        cls = cls.raised_to(implied)
        reasons.append(reason)
    cls = cls.raised_to(inherited)
    if inherited is not ChangeClass.EXACT:
        reasons.append(f"the current best is already {inherited} against the original baseline")
    return cls, reasons


def approximate_outputs(declared: ChangeClass | str, candidate: AuditEvidence, baseline: AuditEvidence,
                        inherited: ChangeClass | str = ChangeClass.EXACT, identical: bool = False) -> bool:
    """Whether the outputs may legitimately drift like an approximation's (a step cut here or in the best):
    `dit_ar_contract.classes.approximate_outputs` of the declared, inherited and found classes."""
    return _approximate([declared, inherited, *(c for c, _ in findings(candidate, baseline, identical))])
