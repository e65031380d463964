"""loop/quality/reuse.py: the best's stored judging is reused only for the best's outputs, evidence and classes
bit for bit, and only while the lane's `performance.reuse` is on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import torch

from dit_ar_contract.config import load_config
from pytest_dit_ar.loop.quality import reuse
from pytest_dit_ar.loop.quality.generation import CandidateRun, CorpusOutputs
from pytest_dit_ar.state.paths import StatePaths
from quality_suite.assessment import QualityAssessment
from quality_suite.audit import AuditEvidence
from tests.helpers.loop import PROJECT

LANE = load_config(PROJECT / "config" / "autoresearch.json").lanes["embedded-cpu"]
TREE = "a" * 32


def session(tmp: Path, lane=LANE) -> SimpleNamespace:
    started = SimpleNamespace(baselines={}, seed_key="the session's secret")
    return SimpleNamespace(lane=lane, started=started, record=started, lane_id="embedded-cpu@cpu", root=PROJECT,
                           paths=StatePaths(tmp), best=lambda: SimpleNamespace(effective_class="exact"))


def corpus_run(value: float = 0.5) -> CandidateRun:
    outputs = CorpusOutputs({"c1": torch.full((3, 4, 4), value)}, {"c1": torch.full((4, 2, 2), value)})
    return CandidateRun(1.0, outputs, AuditEvidence.from_dict(None))


def judging() -> QualityAssessment:
    return QualityAssessment("exact", "exact", (), {}, (), {"psnr_db": {"worst": 99.0}}, {}, {})


def test_the_best_s_judging_is_reused_only_for_the_best_s_outputs_and_classes(tmp_path: Path) -> None:
    s = session(tmp_path)
    reuse.store_kept(s, TREE, corpus_run(), judging(), "exact")
    found, why = reuse.judged_as_best(s, TREE, "exact", "exact", corpus_run())
    assert found is not None and found.summary == {"psnr_db": {"worst": 99.0}} and "bit for bit" in why
    assert reuse.judged_as_best(s, TREE, "exact", "exact", corpus_run(0.25))[0] is None  # other outputs
    assert reuse.judged_as_best(s, TREE, "numerical", "exact", corpus_run())[0] is None  # another declared class
    assert reuse.judged_as_best(s, TREE, "exact", "numerical", corpus_run())[0] is None  # another inherited class
    found, why = reuse.judged_as_best(s, "b" * 32, "exact", "exact", corpus_run())  # another best tree
    assert found is None and "stale" in why and "tree" in why


def test_reuse_off_in_the_lane_judges_in_full(tmp_path: Path) -> None:
    off = session(tmp_path, replace(LANE, performance=replace(LANE.performance, reuse=False)))
    reuse.store_kept(session(tmp_path), TREE, corpus_run(), judging(), "exact")
    assert not reuse.enabled(off) and reuse.enabled(session(tmp_path))
    launcher = SimpleNamespace(tree_digest=lambda root: TREE)
    assert reuse.best_judging(off, launcher, tmp_path, "exact", corpus_run(), True).assessment is None
    assert reuse.best_judging(session(tmp_path), launcher, tmp_path, "exact", corpus_run(), False).assessment is None
    assert reuse.best_judging(session(tmp_path), launcher, tmp_path, "exact", corpus_run(), True).assessment


def test_a_judging_under_other_classes_is_reused_only_for_the_same_effective_class(tmp_path: Path) -> None:
    """The demo's slower change: declared exact on top of an approximate keep with the best's outputs bit for bit;
    the audit gives it the judging's class (approximate) and flag, so the best's judging is its own."""
    s, base = session(tmp_path), AuditEvidence.from_dict(None)
    kept = replace(judging(), declared_class="approximate", effective_class="approximate",
                   audit_reasons=("the step count changed",), approximate_outputs=True)
    reuse.store_kept(s, TREE, corpus_run(), kept, "exact")
    found, why = reuse.judged_as_best(s, TREE, "exact", "approximate", corpus_run(), base)
    assert found is not None and found.effective_class == "approximate" and found.summary == kept.summary
    assert found.declared_class == "exact" and found.audit_reasons == (
        "the current best is already approximate against the original baseline",) and "judging's class" in why
    assert reuse.judged_as_best(s, TREE, "exact", "approximate", corpus_run())[0] is None  # no baseline evidence
    assert reuse.judged_as_best(s, TREE, "exact", "approximate", corpus_run(0.25), base)[0] is None  # other outputs
    found, why = reuse.judged_as_best(s, TREE, "exact", "exact", corpus_run(), base)  # the audit gives it exact
    assert found is None and "classes differ" in why
    flagless = replace(kept, approximate_outputs=False)  # a judging whose approximate-outputs flag differs
    reuse.store_kept(s, TREE, corpus_run(), flagless, "exact")
    assert reuse.judged_as_best(s, TREE, "exact", "approximate", corpus_run(), base)[0] is None


def test_a_quantization_judging_is_reused_only_under_its_own_classes(tmp_path: Path) -> None:
    s, base = session(tmp_path), AuditEvidence.from_dict(None)
    kept = replace(judging(), declared_class="quantization", effective_class="quantization")
    reuse.store_kept(s, TREE, corpus_run(), kept, "exact")
    assert reuse.judged_as_best(s, TREE, "quantization", "exact", corpus_run(), base)[0] is not None
    found, why = reuse.judged_as_best(s, TREE, "exact", "quantization", corpus_run(), base)  # its parent test differs
    assert found is None and "classes differ" in why


def rows_run(rows: float) -> CandidateRun:
    return replace(corpus_run(), evidence=AuditEvidence(denoiser_rows_per_image=rows))


def test_other_evidence_reuses_a_judging_only_where_the_audit_gives_its_class(tmp_path: Path) -> None:
    """The demo's slower change after the step cut: 15 denoiser rows per image against the keep's 10 (the baseline
    ran 20), its outputs the keep's bit for bit: approximate on its own evidence, as the keep's judging was."""
    s, base = session(tmp_path), AuditEvidence(denoiser_rows_per_image=20.0)
    kept = replace(judging(), declared_class="approximate", effective_class="approximate", approximate_outputs=True)
    reuse.store_kept(s, TREE, rows_run(10.0), kept, "exact")
    found, why = reuse.judged_as_best(s, TREE, "exact", "approximate", rows_run(15.0), base)
    assert found is not None and found.declared_class == "exact" and "judging reused" in why
    assert any("fell from 20 to 15" in r for r in found.audit_reasons)  # the candidate's own evidence
    found, why = reuse.judged_as_best(s, TREE, "exact", "exact", rows_run(20.0), base)  # exact on its evidence
    assert found is None and "evidence differs" in why
    s.best = lambda: SimpleNamespace(effective_class="approximate")  # the experiment's way in: marked by class
    launcher = SimpleNamespace(tree_digest=lambda root: TREE)
    assert reuse.best_judging(s, launcher, tmp_path, "exact", rows_run(15.0), True, base).by_class


def test_a_reused_judging_stands_only_for_an_exact_own_change(tmp_path: Path) -> None:
    from quality_suite.own_change import ParentOutputs

    def sized(value: float) -> CandidateRun:  # images large enough for SSIM's window
        return CandidateRun(1.0, CorpusOutputs({"c1": torch.full((3, 16, 16), value)},
                                               {"c1": torch.full((4, 2, 2), value)}), AuditEvidence.from_dict(None))

    run, quality = sized(0.5), LANE.quality
    envelope = {"latent_rel_l2": 0.0, "latent_max_abs": 0.0, "psnr_db": float("inf"), "ssim": 1.0}
    found = reuse.Reused(judging(), "reused", by_class=True)
    same = ParentOutputs(run.outputs.images, run.outputs.latents, run.evidence, "approximate")
    assert reuse.confirm_own_change(found, "exact", run, same, quality, envelope) is found
    assert reuse.confirm_own_change(found, "exact", run, None, quality, envelope) is found  # no best: nothing to judge
    other = sized(0.25).outputs
    moved = ParentOutputs(other.images, other.latents, run.evidence, "approximate")
    assert reuse.confirm_own_change(found, "exact", run, moved, quality, envelope).assessment is None
    judged = reuse.confirm_own_change(found, "approximate", run, same, quality, envelope)
    assert judged.assessment is None and "approximate" in judged.note
    # a no-op declared approximate after an approximate keep: the same classes and evidence, its judging stands
    same_classes = replace(found, by_class=False)
    assert reuse.confirm_own_change(same_classes, "approximate", run, same, quality, envelope) is same_classes
