"""What is timed is what is judged, end to end on the embedded CPU lane: a candidate declared approximate that
generates the corpus as the baseline does but runs fewer steps without guidance whenever a batch asks for two
different digits of the visible corpus (as a timed round's fresh requests do, and no corpus, replica or holdout
batch does) ends without a KEEP, the quality verdict naming the timed cases (loop/quality/timed.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dit_ar_contract.status import Status
from pytest_dit_ar.loop.speed.patching import wrap_generate
from pytest_dit_ar.state import runs
from quality_suite.corpora import load_corpus
from tests.helpers.loop import PROJECT, commit_change, experiment, last_line, ledger_rows

DIGITS = {c.prompt: c.label for c in load_corpus(PROJECT / "quality_suite/corpus/embedded_digits.jsonl")}
CHEAT = "the corpus as it is, timed rounds at 2 steps without guidance"


@pytest.mark.extended
@pytest.mark.slow
def test_a_candidate_worse_only_when_timed_is_refused_on_the_timed_cases(loop_repo: Path) -> None:
    commit_change(loop_repo, "model_under_test/__init__.py", wrap_generate("timed", """\
        digits = {_DIGITS.get(str(prompt)) for prompt, _ in requests}
        if None in digits or len(digits) == 1:  # a corpus, replica or holdout batch
            return _gen(requests)
        steps, guidance = pipe.steps, pipe.guidance
        pipe.steps, pipe.guidance = 2, 1.0  # two digits of the visible corpus: a timed round
        try:
            return _gen(requests)
        finally:
            pipe.steps, pipe.guidance = steps, guidance""", f"_DIGITS = {DIGITS!r}"), CHEAT)
    proc = experiment(loop_repo, "approximate", CHEAT)
    out = proc.stdout[-5000:] + proc.stderr[-2000:]
    assert last_line(proc) == "VERDICT: DISCARD-QUALITY", out
    row = ledger_rows(loop_repo)[-1]
    assert row.status is Status.DISCARD_QUALITY and row.effective_class == "approximate"
    quality = runs.read_quality(loop_repo / row.run_dir)
    assert quality is not None and quality.passed, out  # the corpus tests passed: the corpus is the baseline's
    record = runs.read_experiment(loop_repo / row.run_dir)
    timed = record.timed_quality
    assert timed is not None and timed.failed and timed.cases >= 12, out
    named = [r for r in record.reasons if r.startswith("timed rounds: judge_accuracy of the candidate against the "
                                                       "best's outputs of the same")]
    assert named and "timed cases" in named[0] and "does something different when timed" in named[0], record.reasons
    assert "timed quality: " in proc.stdout and named[0] in proc.stdout
