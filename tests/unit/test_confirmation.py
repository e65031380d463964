"""The best confirmed on fresh seeds (loop/quality/confirmation.py, state/confirmation.py): the fresh cases' keying,
the class the confirmation judges at, the cases it plans, its record and what the summary and the report say."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dit_ar_contract.config import load_config
from dit_ar_contract.status import Status
from pytest_dit_ar.loop.quality import confirmation as confirm
from pytest_dit_ar.report.summary import markdown
from pytest_dit_ar.state import confirmation as record_of
from pytest_dit_ar.state import ledger
from pytest_dit_ar.state.best import BestRecord
from pytest_dit_ar.state.ledger import LedgerRow
from pytest_dit_ar.state.paths import StatePaths
from quality_suite import task_tests
from quality_suite.corpora import fresh_cases, keyed_seed, load_corpus, purpose_key, replicas
from tests.helpers.loop import PROJECT

LANE = "embedded-cpu"
CONFIG = load_config(PROJECT / "config" / "autoresearch.json")
QUALITY = CONFIG.lanes[LANE].quality
CORPUS = load_corpus(PROJECT / CONFIG.lanes[LANE].corpus)
HOLDOUT = load_corpus(PROJECT / CONFIG.lanes[LANE].holdout_corpus)
JUDGE = "judge_accuracy"
FIGURES = task_tests.Figures({JUDGE: 0.95}, {JUDGE: 3.9e-5}, {"approximate margin": {JUDGE: 0.04},
                                                             "resolution": {JUDGE: 1.2e-4}}, {JUDGE: 1.6e-3})
SECRET = "0f" * 16  # a session's seed key


# -- the fresh cases: ids and seeds no candidate saw -----------------------------------------------------------

def test_fresh_cases_have_ids_and_worker_seeds_of_their_own() -> None:
    fresh = fresh_cases(CORPUS, 200)
    assert len(fresh) == 200 and len({c.id for c in fresh}) == 200
    assert [c.id for c in fresh[:2]] == [f"{CORPUS[0].id}-c1", f"{CORPUS[1].id}-c1"]
    assert fresh[40].id == f"{CORPUS[0].id}-c2"
    assert all((c.prompt, c.label) == (o.prompt, o.label) for c, o in zip(fresh, CORPUS * 5))  # prompts, labels
    seen = replicas(CORPUS, 160) + CORPUS + HOLDOUT  # every case a candidate's worker is sent
    assert not {c.id for c in fresh} & {c.id for c in seen}
    key = confirm.key(SimpleNamespace(started=SimpleNamespace(seed_key=SECRET)))  # type: ignore[arg-type]
    assert key == purpose_key(SECRET, confirm.PURPOSE)
    worker_seen = {keyed_seed(c.seed, SECRET) for c in seen}  # as the corpus, holdout and replicas are keyed
    fresh_seeds = [keyed_seed(c.seed, key) for c in fresh]
    assert len(set(fresh_seeds)) == 200 and not set(fresh_seeds) & worker_seen
    assert not {c.seed for c in fresh} & {c.seed for c in seen}  # the unkeyed seeds differ too


def test_the_fresh_key_is_derived_from_the_secret_for_this_purpose_alone() -> None:
    key = purpose_key(SECRET, confirm.PURPOSE)
    assert key == purpose_key(SECRET, confirm.PURPOSE) and key != SECRET and len(key) == 64
    assert key != purpose_key(SECRET, "another purpose") and key != purpose_key("1e" * 16, confirm.PURPOSE)


def test_a_quantization_built_on_an_approximate_keep_is_confirmed_at_the_approximate_claim() -> None:
    assert confirm.judged_class("quantization", approximate_chain=True).word == "approximate"
    assert confirm.judged_class("quantization", approximate_chain=False).word == "quantization"
    assert confirm.judged_class("approximate", approximate_chain=True).word == "approximate"


def test_the_cases_it_plans_are_what_the_class_needs_to_pass() -> None:
    assert task_tests.cases_to_pass("approximate", QUALITY, FIGURES, 40) == 160  # n_min 119, first look past it
    assert task_tests.cases_to_pass("quantization", QUALITY, FIGURES, 40) == 200  # n_pass
    assert task_tests.cases_to_pass("quantization", QUALITY, FIGURES, 18) == 90  # capped at the budget


# -- the record ----------------------------------------------------------------------------------------------

def judged(cls: str, loss: float, n: int = 160) -> task_tests.Judgement:
    rng = np.random.default_rng(3)
    base = rng.uniform(0.6, 1.0, n)
    pair = {(JUDGE, task_tests.BASELINE): task_tests.Paired(base, base - loss)}
    return task_tests.judge_case_scores(cls, pair, QUALITY, FIGURES, 40)


def record(confirmed: bool = True, best: str = "b" * 40, loss: float = 0.0) -> record_of.ConfirmationRecord:
    j = judged("approximate", loss)
    return record_of.ConfirmationRecord(LANE, best, "a" * 40, "approximate", "approximate", confirmed, j.cases,
                                        j.tests, "2026-12-07T10:00:00+0000", "" if confirmed else "not shown",
                                        "confirm-1", 12.5, "" if confirmed else "revert it: `git switch ...`")


def test_the_record_reads_back_through_its_typed_reader(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path)
    kept = record()
    record_of.write(paths, kept, paths.run("r-reval"))
    assert paths.confirmation(LANE) == tmp_path / ".autoresearch" / "confirmation" / f"{LANE}.json"
    back = record_of.read(paths, LANE)
    assert back == kept and back.tests[0].passed and back.tests[0].last.n == 160
    assert json.loads(paths.confirmation(LANE).read_text())["decision"] == "confirmed"
    assert record_of.read_file(paths.run("r-reval") / record_of.RUN_RECORD) == kept  # the run folder's copy
    assert record_of.of_best(paths, LANE, "b" * 40) == kept
    assert record_of.of_best(paths, LANE, "c" * 40) is None  # another best: not its confirmation
    newer = record(False, "c" * 40, loss=0.2)
    record_of.write_run_copy(paths.run("r-other"), newer)  # a fleet's slot writes the run folder's copy only
    assert record_of.of_best(paths, LANE, "c" * 40, (paths.run("r-other"),)) == newer


def test_only_an_approximate_or_quantization_best_needs_a_confirmation() -> None:
    def best(cls: str, commit: str = "b" * 40) -> BestRecord:
        return BestRecord(commit, "t", "autoresearch/t", "r", "now", "ref", effective_class=cls)

    assert record_of.needs_confirmation(best("approximate"), "a" * 40)
    assert record_of.needs_confirmation(best("quantization"), "a" * 40)
    assert not record_of.needs_confirmation(best("numerical"), "a" * 40)
    assert not record_of.needs_confirmation(best("approximate", "a" * 40), "a" * 40)  # still the baseline
    assert not record_of.needs_confirmation(None, "a" * 40)


# -- what the summary and the report say -----------------------------------------------------------------------

@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A session whose best is an approximate keep b on the baseline a."""
    root = tmp_path / "repo"
    paths = StatePaths(root)
    paths.dir.mkdir(parents=True)
    paths.session.write_text(json.dumps({"lane_id": LANE, "tag": "night"}))
    best = BestRecord("b" * 40, "night", "autoresearch/night", "r-keep", "now", "ref", effective_class="approximate",
                      history=("a" * 40, "b" * 40))
    paths.best.write_text(json.dumps({LANE: best.as_dict()}))
    for status, commit, cls in ((Status.BASELINE, "a" * 40, ""), (Status.KEEP, "b" * 40, "approximate")):
        ledger.append(paths.ledger, LedgerRow(timestamp="2026-12-07T09:00:00+0000", run_id="r", lane=LANE,
                                              commit=commit, parent="", status=status, effective_class=cls,
                                              description="half the steps"))
    return root


def test_the_summary_says_confirmed_with_each_test_s_estimate_and_bound(state: Path) -> None:
    record_of.write(StatePaths(state), record())
    text = markdown(state)
    assert "### The best on fresh seeds" in text
    assert f"**CONFIRMED: best {'b' * 10} (approximate) against the original baseline {'a' * 10} on 160 fresh cases" \
        in text
    line = next(ln for ln in text.splitlines() if ln.startswith("- judge_accuracy vs the original baseline"))
    assert "degradation +0" in line and "one-sided" in line and "bound" in line and "over 160 fresh cases" in line
    assert "severe cases (loss > 0.5) 0 of 160" in line and line.endswith(": PASS")


def test_the_summary_says_not_confirmed_with_what_to_do(state: Path) -> None:
    record_of.write(StatePaths(state), record(False, loss=0.2))
    text = markdown(state)
    assert "**NOT CONFIRMED: best" in text and ": FAIL" in text and "- revert it: `git switch ...`" in text


def test_the_summary_says_why_the_confirmation_did_not_run(state: Path) -> None:
    assert "**not confirmed (skipped): `--no-confirm`" in markdown(state, skipped=True)
    assert "**not confirmed yet: the best has not been confirmed on fresh seeds (another experiment holds the lock)" \
        in markdown(state, why_not="another experiment holds the lock")
    best = json.loads(StatePaths(state).best.read_text())
    best[LANE]["effective_class"] = "exact"
    StatePaths(state).best.write_text(json.dumps(best))
    assert "**nothing to confirm: the best's class against the original baseline is exact" in markdown(state)


def test_the_report_page_says_it_in_the_lane_header(state: Path) -> None:
    from pytest_dit_ar.report.page import _confirmed
    from pytest_dit_ar.report.views import ReportContext
    from pytest_dit_ar.state import runs

    paths = StatePaths(state)
    record_of.write(paths, record())
    ctx = ReportContext(state, paths, None, runs.read_bests(paths), "the target")
    said = _confirmed(LANE, ledger.read(paths.ledger), ctx)
    assert said.startswith("CONFIRMED: best") and "judge_accuracy vs the original baseline" in said
    paths.confirmation(LANE).unlink()
    skipped = ReportContext(state, paths, runs.read_session(paths), runs.read_bests(paths), "the target",
                            confirm_skipped=True)
    assert _confirmed(LANE, ledger.read(paths.ledger), skipped).startswith("not confirmed (skipped)")


def test_a_best_not_confirmed_says_how_to_revert_its_approximate_keep(state: Path) -> None:
    from pytest_dit_ar.loop.revalidate import approximate_keeps, revert_advice

    paths = StatePaths(state)
    ledger.append(paths.ledger, LedgerRow(timestamp="2026-12-07T09:30:00+0000", run_id="r2", lane=LANE,
                                          commit="c" * 40, parent="b" * 40, status=Status.KEEP,
                                          effective_class="approximate", description="batched guidance"))
    best = BestRecord("c" * 40, "night", "autoresearch/night", "r2", "now", "ref", effective_class="approximate",
                      history=("a" * 40, "b" * 40, "c" * 40))
    session = SimpleNamespace(paths=paths, lane_id=LANE, best=lambda: best, started=SimpleNamespace(tag="night"))
    keeps = approximate_keeps(session)  # type: ignore[arg-type]
    assert [k.commit for k in keeps] == ["b" * 40, "c" * 40]
    advice = revert_advice(session, keeps)  # type: ignore[arg-type]
    assert advice.startswith("not confirmed changes nothing (the best stays); revert the approximate keep "
                             f"{'b' * 10} (half the steps)")
    assert f"`git switch --detach {'b' * 10}^ && dit-ar init --tag night-without-{'b' * 7} --new-baseline && " \
           "dit-ar baseline`" in advice
    assert f"bring back the later keeps {'c' * 10} one at a time" in advice
    assert revert_advice(session, []) == ""  # type: ignore[arg-type]
