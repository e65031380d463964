"""The verdict order, table-driven: scope -> crash -> quality -> performance; the first failing gate decides."""

from __future__ import annotations

import pytest

from dit_ar_contract.errors import EXIT_DISCARD, EXIT_OK
from dit_ar_contract.status import WORDS, Status
from pytest_dit_ar.loop.verdict import NO_PERFORMANCE, NO_QUALITY, Finding, decide

OK_Q = Finding(True, ("quality ok",))
BAD_Q = Finding(False, ("psnr_db case c1: 20 (needs >= 30)",))
OK_P = Finding(True, ("block 2: +30%",))
BAD_P = Finding(False, ("not significant",))

TABLE = [
    # scope problems, crash, quality, performance -> status, first reason
    (["changed: config/autoresearch.json"], "boom", BAD_Q, BAD_P, Status.DISCARD_SCOPE, "changed: config"),
    ([], "candidate crashed", BAD_Q, BAD_P, Status.CRASH, "candidate crashed"),
    ([], None, BAD_Q, OK_P, Status.DISCARD_QUALITY, "psnr_db"),
    ([], None, None, OK_P, Status.DISCARD_QUALITY, NO_QUALITY),
    ([], None, Finding(False), OK_P, Status.DISCARD_QUALITY, "the quality gate failed"),
    ([], None, OK_Q, BAD_P, Status.DISCARD_PERFORMANCE, "not significant"),
    ([], None, OK_Q, None, Status.DISCARD_PERFORMANCE, NO_PERFORMANCE),
    ([], None, OK_Q, OK_P, Status.KEEP, "block 2"),
]


@pytest.mark.parametrize("scope,crash,quality,perf,status,reason", TABLE,
                         ids=[f"{row[4].word}-{i}" for i, row in enumerate(TABLE)])
def test_order(scope, crash, quality, perf, status, reason) -> None:
    verdict = decide(scope, crash, quality, perf)
    assert verdict.status is status
    assert verdict.reason.startswith(reason)
    assert verdict.line == f"VERDICT: {status.verdict_word}"
    assert verdict.exit_code == (EXIT_OK if status is Status.KEEP else EXIT_DISCARD)


def test_the_vocabulary_is_defined_once_and_complete() -> None:
    assert WORDS == ("baseline", "keep", "discard-quality", "discard-performance", "discard-scope", "crash",
                     "revalidate")
    assert all(Status.from_word(s.word) is s for s in Status)
    assert {s.verdict_word for s in Status if s.is_experiment} == {
        "KEEP", "DISCARD-QUALITY", "DISCARD-PERFORMANCE", "DISCARD-SCOPE", "CRASH"}
    assert Status.REVALIDATE.verdict_word == "REVALIDATED" and not Status.REVALIDATE.is_failure
    assert len({s.colour for s in Status}) == len(Status)
    assert [s.word for s in Status if s.is_failure] == ["discard-quality", "discard-performance", "discard-scope",
                                                        "crash"]
    with pytest.raises(ValueError, match="not a status word"):
        Status.from_word("kept")
