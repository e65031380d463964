"""The vocabulary in the ground: the change classes (one enum, one 'approximate outputs' rule) and the workload
spec's keys (one TypedDict, named by the mutable side's docstring)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from dit_ar_contract.classes import WORDS, ChangeClass, approximate_outputs
from dit_ar_contract.config import WorkloadSpec, load_config
from quality_suite import audit
from quality_suite.audit import AuditEvidence, PipelineInspection

ROOT = Path(__file__).resolve().parents[2]


def test_the_classes_are_ranked_mildest_first_and_read_from_their_words() -> None:
    assert WORDS == ("exact", "numerical", "approximate", "quantization")
    assert [c.rank for c in ChangeClass] == [0, 1, 2, 3]
    assert ChangeClass.NUMERICAL.raised_to("approximate") is ChangeClass.APPROXIMATE
    assert ChangeClass.QUANTIZATION.raised_to(ChangeClass.EXACT) is ChangeClass.QUANTIZATION
    assert ChangeClass.from_word("numerical") is ChangeClass.NUMERICAL
    with pytest.raises(ValueError, match="'fast' is not a change class; known: exact, numerical"):
        ChangeClass.from_word("fast")
    # a member is its word wherever a record stores the word (ledger cell, JSON, f-string)
    assert ChangeClass.EXACT == "exact" and f"{ChangeClass.EXACT}" == "exact" and str(ChangeClass.EXACT) == "exact"
    assert json.dumps({"c": ChangeClass.QUANTIZATION}) == '{"c": "quantization"}'
    assert [c for c in ChangeClass if c.judged_on_the_task] == [ChangeClass.APPROXIMATE, ChangeClass.QUANTIZATION]


def test_one_approximate_outputs_rule_for_the_gate_and_the_timed_rounds() -> None:
    assert approximate_outputs(["quantization", "exact"]) is False  # no step cut: the numerical floors
    assert approximate_outputs(["quantization", ChangeClass.APPROXIMATE]) is True  # the best cut steps
    base = AuditEvidence(PipelineInspection({"float32": 10}), ("float32",), 20.0)
    fewer_steps = AuditEvidence(PipelineInspection({"float32": 10}), ("float32",), 10.0)
    assert audit.approximate_outputs("quantization", base, base) is False
    assert audit.approximate_outputs("exact", fewer_steps, base) is True  # found by the audit
    effective, _ = audit.effective_class("exact", fewer_steps, base, inherited="numerical")
    assert effective is ChangeClass.APPROXIMATE
    # the timed rounds' check reads the assessment's flag; no other spelling of the rule is left in the loop
    timing = (ROOT / "pytest_dit_ar" / "loop" / "speed" / "timing.py").read_text(encoding="utf-8")
    assert "approx = quality.approximate_outputs" in timing


def test_the_docstring_of_the_mutable_model_names_every_workload_key() -> None:
    docstring = ast.get_docstring(ast.parse((ROOT / "model_under_test" / "__init__.py").read_text(encoding="utf-8")))
    named = re.search(r"``spec`` keys: ([^.]+)\.", docstring or "", re.S)
    assert named, "model_under_test/__init__.py no longer lists the spec keys"
    keys = {k.strip() for k in named.group(1).replace("\n", " ").split(",")}
    assert keys == set(WorkloadSpec.__required_keys__), keys ^ set(WorkloadSpec.__required_keys__)


def test_a_lane_makes_every_key_of_the_spec() -> None:
    lane = load_config(ROOT / "config" / "autoresearch.json").lanes["embedded-cpu"]
    spec = lane.workload(ROOT)
    assert set(spec) == set(WorkloadSpec.__required_keys__) and spec["gpus"] == 1
    assert spec["weights"] == str((ROOT / "assets" / "embedded-digits").resolve()) == lane.weights_path(ROOT)
