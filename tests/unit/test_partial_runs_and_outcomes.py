"""A plain run of a few cases is judged case by case; what a suite test's exception says about the harness;
a multi-line refusal on one last line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dit_ar_contract.config import load_config
from dit_ar_contract.errors import CandidateCrash
from pytest_dit_ar.plugin.session import harness_error
from pytest_dit_ar.plugin.terminal import one_line
from quality_suite import task_metrics
from quality_suite.assessment import BaselineReference, Outputs, assess
from quality_suite.audit import AuditEvidence
from quality_suite.corpora import Case
from tests.helpers.loop import PROJECT

QUALITY = load_config(PROJECT / "config" / "autoresearch.json").lanes["embedded-cpu"].quality
CASES = [Case(f"digit{i}-s{i}", f"a digit {i}", i, label=i) for i in range(2)]


def outputs(shift: float = 0.0) -> Outputs:
    g = torch.Generator().manual_seed(0)
    images = {c.id: (torch.rand(3, 16, 16, generator=g) + shift).clamp(0, 1) for c in CASES}
    latents = {c.id: torch.randn(4, 4, 4, generator=g) + shift for c in CASES}
    return Outputs(images, latents, AuditEvidence())


def reference(task: dict[str, float]) -> BaselineReference:
    return BaselineReference(outputs(), {}, task, {}, {})


def test_only_per_case_task_metrics_are_computable_over_a_subset() -> None:
    assert task_metrics.per_case_only(("judge_accuracy", "frechet_distance", "clip_score")) == ("judge_accuracy",)


def test_a_partial_run_makes_no_corpus_level_check() -> None:
    # the baseline recorded a Fréchet distance over its whole corpus; one case cannot be compared with it
    ref = reference({"frechet_distance": 1.0})
    one = [CASES[0]]
    partial = assess("exact", "exact", outputs(), ref, one, QUALITY, ("frechet_distance",), Path("."),
                     whole_corpus=False)
    assert partial.aggregate == () and partial.task_candidate == {} and partial.passed
    whole = assess("exact", "exact", outputs(), ref, CASES, QUALITY, (), Path("."))
    assert [c.name for c in whole.aggregate if not c.passed] == ["frechet_distance"]  # the candidate's is missing


def test_a_partial_run_still_fails_a_changed_case() -> None:
    dimmed = outputs(shift=-0.3)
    result = assess("exact", "exact", dimmed, reference({}), [CASES[0]], QUALITY, (), Path("."),
                    whole_corpus=False)
    assert not result.passed and result.aggregate == ()


def call_raising(exc: BaseException) -> pytest.CallInfo:
    def boom() -> None:
        raise exc
    return pytest.CallInfo.from_call(boom, "call")


@pytest.mark.parametrize("exc", [AssertionError("psnr"), CandidateCrash("worker died (exit code 3)")])
def test_a_failed_check_or_the_candidate_s_crash_is_not_a_harness_error(exc: BaseException) -> None:
    assert harness_error("suite::test", call_raising(exc)) is None


def test_anything_else_raised_by_a_suite_test_is_the_harness_s_error() -> None:
    said = harness_error("suite::test", call_raising(KeyError("psnr_db")))
    assert said is not None and said.startswith("suite::test (call): KeyError")
    assert harness_error("suite::test", pytest.CallInfo.from_call(lambda: None, "call")) is None


def test_a_multi_line_refusal_keeps_every_line_on_the_last_one() -> None:
    text = "the working tree is not clean (commit or remove these first):\n  ?? model_under_test/x.py\n   M a.py"
    assert one_line(text) == ("the working tree is not clean (commit or remove these first): "
                              "?? model_under_test/x.py; M a.py")
    assert one_line("plain reason") == "plain reason"
