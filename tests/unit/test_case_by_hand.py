"""`dit-ar case ID` (loop/case.py): a corpus case or a replica found by its id, and the seed it prints is the one the
harness's corpus run sends the workers for it in this session (the corpus seed keyed by the session's secret)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from dit_ar_contract.errors import Refused
from pytest_dit_ar.loop.case import find_case, session_seed
from pytest_dit_ar.loop.quality.generation import padded
from pytest_dit_ar.state.session import open_session
from quality_suite.corpora import Case, load_corpus, replicas
from tests.helpers.user_repo import user_repo


def test_a_case_and_a_replica_are_found_by_their_ids() -> None:
    cases = [Case("a-bowl-s4101", "a bowl", 4101), Case("a-ship-s4102", "a ship", 4102)]
    assert find_case(cases, "a-ship-s4102") is cases[1]
    assert find_case(cases, "a-bowl-s4101-r2") == replicas(cases, 4)[2]  # what the task-score tests add
    with pytest.raises(Refused, match="no case 'a-cat-s4103'") as refused:
        find_case(cases, "a-cat-s4103")
    assert "--collect-only" in refused.value.way_out


def test_the_printed_seed_is_the_one_the_corpus_run_sends(tmp_path: Path) -> None:
    user = user_repo(tmp_path)
    session = open_session(user.config)
    for case in load_corpus(user.corpus):
        sent = padded([case], 1, session.started.seed_key, random.Random(0))[0][1]
        assert session_seed(session, case) == sent != case.seed
