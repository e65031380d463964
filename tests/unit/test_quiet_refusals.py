"""`dit-ar experiment`'s refusal is its line and its way out, nothing of pytest's framing (plugin/terminal.py's
HeldOutput, plugin/ending.py): what pytest writes is held until the run starts, dropped on a refusal or a verdict
before any candidate code ran, and written out whole otherwise (also when collection failed: its errors are the
reason)."""

from __future__ import annotations

import io
from types import SimpleNamespace

from dit_ar_contract.errors import Refused
from pytest_dit_ar.plugin.ending import Ending
from pytest_dit_ar.plugin.terminal import HeldOutput

BANNER = "============ test session starts ============\nrootdir: /x\ncollected 9 items\n"


def held() -> tuple[io.StringIO, HeldOutput]:
    stream = io.StringIO()
    out = HeldOutput(stream)
    out.write(BANNER)
    return stream, out


def test_a_refusal_is_two_lines() -> None:
    stream, out = held()
    ending = Ending(out)
    ending.refuse(Refused("the working tree is not clean", way_out="commit or remove scratch.txt"))
    ending.drop(SimpleNamespace(testsfailed=0))
    out.write("!!!!! _pytest.outcomes.Exit: dit-ar refused !!!!!\n")  # pytest's framing after the refusal
    ending.write(way_out="the session's, not needed: the refusal has its own")
    assert stream.getvalue() == "REFUSED: the working tree is not clean\nway out: commit or remove scratch.txt\n"


def test_a_refusal_without_its_own_way_out_gets_the_sessions() -> None:
    stream, out = held()
    ending = Ending(out)
    ending.refuse(Refused("another experiment holds .autoresearch/lock"))
    ending.drop(SimpleNamespace(testsfailed=0))
    ending.write(way_out="fix what the refusal names, then `dit-ar experiment` judges the commit")
    assert stream.getvalue().splitlines()[1].startswith("way out: fix what the refusal names")


def test_a_verdict_before_the_run_is_its_lines_and_the_verdict() -> None:
    stream, out = held()
    ending = Ending(out)
    ending.refuse(Refused("corpus x does not match its checksum"))  # the commit broke it: a discard, not a refusal
    ending.verdict_before_the_run("VERDICT: DISCARD-SCOPE", ["DISCARD-SCOPE: the commit changes corpus/x", "reset"],
                                  SimpleNamespace(testsfailed=0))
    ending.write()
    assert stream.getvalue() == "DISCARD-SCOPE: the commit changes corpus/x\nreset\nVERDICT: DISCARD-SCOPE\n"


def test_a_run_that_starts_or_fails_to_collect_keeps_all_of_pytests_output() -> None:
    stream, out = held()
    Ending(out).started()
    out.write("test_quality.py ....\n")
    assert stream.getvalue() == BANNER + "test_quality.py ....\n"
    stream, out = held()
    ending = Ending(out)
    ending.refuse(Refused("collection failed (see the errors above); nothing was judged: fix them and run again"))
    ending.drop(SimpleNamespace(testsfailed=1))
    out.write("ERROR collecting test_quality.py\n")
    assert stream.getvalue().startswith(BANNER + "ERROR collecting")


def test_without_held_output_the_lines_follow_pytests_own(capsys) -> None:  # noqa: ANN001 - pytest's fixture
    ending = Ending(None)  # `pytest --dit-ar-experiment`: pytest's framing stays, the refusal comes after it
    ending.refuse(Refused("x", way_out="y"))
    ending.drop(SimpleNamespace(testsfailed=0))
    ending.write()
    assert capsys.readouterr().out == "REFUSED: x\nway out: y\n"
