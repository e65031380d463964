"""The classification audit on a real (randomly initialised) embedded-lane transformer."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from dit_ar_contract.classes import ChangeClass
from quality_suite import audit
from quality_suite.audit import AuditEvidence, PipelineInspection
from tests.helpers.loop import PROJECT


class Pipe:
    def __init__(self, transformer: torch.nn.Module):
        self.components = {"transformer": transformer}


@pytest.fixture(scope="module")
def dit() -> torch.nn.Module:
    from diffusers import DiTTransformer2DModel  # here, not at collection: diffusers takes seconds to import

    config = json.loads((PROJECT / "assets" / "embedded-digits" / "transformer" / "config.json").read_text())
    return DiTTransformer2DModel.from_config(config).eval()


def side(module: torch.nn.Module, acts: tuple[str, ...] = ("float32",), rows: float = 40.0) -> AuditEvidence:
    return AuditEvidence(PipelineInspection.from_dict(audit.inspect_pipeline(Pipe(module))), acts, rows)


def test_audit_keeps_an_exact_reordering_exact(dit: torch.nn.Module) -> None:
    # batching CFG into one forward keeps 2 rows per image and step: same evidence as the baseline
    assert audit.effective_class("exact", side(copy.deepcopy(dit)), side(dit)) == ("exact", [])


def test_audit_raises_a_bf16_cast_to_numerical(dit: torch.nn.Module) -> None:
    cls, reasons = audit.effective_class("exact", side(copy.deepcopy(dit).to(torch.bfloat16), ("bfloat16",)), side(dit))
    assert cls == "numerical" and "bfloat16" in reasons[0]  # half the bytes is not quantization
    autocast = side(copy.deepcopy(dit), ("bfloat16", "float32"))  # weights fp32, activations bf16
    assert audit.effective_class("exact", autocast, side(dit))[0] == "numerical"
    bf = copy.deepcopy(dit).to(torch.bfloat16)
    assert audit.effective_class("exact", side(bf, ("bfloat16",)), side(bf, ("bfloat16",)))[0] == "exact"


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")  # torch.ao is deprecated
def test_audit_raises_dynamic_int8_to_quantization(dit: torch.nn.Module) -> None:
    q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(dit), {torch.nn.Linear}, dtype=torch.qint8)
    cls, reasons = audit.effective_class("exact", side(q), side(dit))
    assert cls == "quantization"
    assert any("torch.ao.nn.quantized" in r for r in reasons) and any("packed" in r for r in reasons)
    assert audit.effective_class("approximate", side(q), side(dit))[0] == "quantization"


def test_audit_raises_fewer_denoiser_rows_to_approximate(dit: torch.nn.Module) -> None:
    cls, reasons = audit.effective_class("numerical", side(dit, rows=20.0), side(dit, rows=40.0))
    assert cls == "approximate" and "from 40 to 20" in reasons[0]
    assert audit.effective_class("quantization", side(dit, rows=20.0), side(dit))[0] == "quantization"


# -- denoiser rows a CUDA graph hides (examples/cuda-graphs judged on the H200, 2026-12-02) -----------------

def test_a_generate_without_a_seen_forward_makes_the_row_count_blind_not_a_step_cut():
    from pytest_dit_ar.loop.quality.generation import counted_rows

    assert counted_rows([16.0, 16.0, 16.0]) == (16.0, False)
    assert counted_rows([16.0, 8.0]) == (8.0, False)  # a cut on some requests is still seen
    assert counted_rows([6.0, 0.0, 0.0]) == (None, True)  # capture calls, then replays: no step count
    assert counted_rows([]) == (None, False)


def test_blind_rows_are_reported_and_imply_no_class():
    base = AuditEvidence.from_dict({"audit": {"param_dtypes": {"float32": 10}, "weight_bytes": 40},
                                    "activation_dtypes": ["float32"], "denoiser_rows_per_image": 16.0})
    graphed = AuditEvidence(base.pipeline, base.activation_dtypes, None, True)
    cls, reasons = audit.effective_class("exact", graphed, base)
    assert cls is ChangeClass.EXACT and any("ran unseen" in r for r in reasons)
    assert not audit.approximate_outputs("exact", graphed, base)
    assert AuditEvidence.from_dict(graphed.as_dict()) == graphed  # stored and read back alike
    cut = AuditEvidence(base.pipeline, base.activation_dtypes, 8.0, False)
    assert audit.effective_class("exact", cut, base)[0] is ChangeClass.APPROXIMATE


# -- fewer rows with identical outputs (the PixArt wasted pass judged on the H200, 2026-12-02) -------------

def test_fewer_rows_with_bit_identical_outputs_removed_passes_not_steps():
    """Dropping a wasted transformer pass halves the rows and changes no output bit: exact, not a step cut.
    The same fall with outputs that moved is a step cut as before."""
    from pathlib import Path

    from quality_suite.assessment import BaselineReference, Outputs, assess
    from tests.unit.test_partial_runs_and_outcomes import CASES, QUALITY, outputs

    base = AuditEvidence.from_dict({"audit": {"param_dtypes": {"float32": 10}, "weight_bytes": 40},
                                    "activation_dtypes": ["float32"], "denoiser_rows_per_image": 16.0})
    half = AuditEvidence(base.pipeline, base.activation_dtypes, 8.0, False)
    assert audit.effective_class("exact", half, base, identical=True)[0] is ChangeClass.EXACT
    assert not audit.approximate_outputs("exact", half, base, identical=True)
    ref = BaselineReference(Outputs(outputs().images, outputs().latents, base), {}, {}, {}, {})
    same = assess("exact", "exact", Outputs(outputs().images, outputs().latents, half), ref, CASES, QUALITY, (),
                  Path("."))
    assert same.effective_class == "exact" and same.passed and "redundant passes" in same.audit_reasons[0]
    moved = outputs(shift=1e-3)
    cut = assess("exact", "exact", Outputs(moved.images, moved.latents, half), ref, CASES, QUALITY, (), Path("."))
    assert cut.effective_class == "approximate"
