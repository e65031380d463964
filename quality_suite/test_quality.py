"""Quality gate of the model under test against the ORIGINAL baseline (docs/design/quality.md).

One test per corpus case (readable ids, so an IDE can run one case) and one over the whole corpus.
They judge the working tree in plain runs and the candidate commit inside an experiment.
"""

import pytest

pytestmark = pytest.mark.quality


def test_case_against_baseline(dit_ar_case, dit_ar_quality):
    """The case's outputs stay within the gate of the effective class."""
    failed = [c.describe() for c in dit_ar_quality.case_checks(dit_ar_case.id) if not c.passed]
    assert not failed, f"{dit_ar_case.id} under the {dit_ar_quality.effective_class} gate: " + "; ".join(failed)


def test_corpus_aggregate(dit_ar_quality):
    """Mean fidelity floors and task-quality scores over the whole corpus."""
    failed = [c.describe() for c in dit_ar_quality.aggregate if not c.passed]
    assert not failed, f"corpus under the {dit_ar_quality.effective_class} gate: " + "; ".join(failed)
