"""The plugin's fixtures. They hand out the run's evidence and what it was computed from; none of them
exposes the plugin's private state, and none lets a test change a verdict."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dit_ar_contract.errors import CandidateCrash, Refused

from .session import PluginSession


def _fail_refused(exc: Refused) -> None:
    pytest.fail(f"dit-ar: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def dit_ar(request: pytest.FixtureRequest) -> PluginSession:
    """The plugin's state for this run: options, experiment mode, the outcomes so far."""
    return request.config.pluginmanager.get_plugin("dit-ar-state").session


@pytest.fixture(scope="session")
def dit_ar_evidence(dit_ar: PluginSession):
    """The run's evidence about the working tree (experiment or plain mode); refusals fail loudly."""
    try:
        return dit_ar.evidence()
    except Refused as exc:
        _fail_refused(exc)


@pytest.fixture(scope="session")
def dit_ar_session(dit_ar_evidence):
    """The loaded session: config, lane, pinned device, state paths and session.json's record."""
    return dit_ar_evidence.session


@pytest.fixture(scope="session")
def dit_ar_config(dit_ar_session):
    """The validated session contract."""
    return dit_ar_session.config


@pytest.fixture(scope="session")
def dit_ar_device(dit_ar_session):
    """The pinned device of the lane (its identity is recorded in session.json)."""
    return dit_ar_session.target


@pytest.fixture(scope="session")
def dit_ar_corpus(dit_ar_evidence):
    """The lane's frozen corpus, checksum-verified."""
    return dit_ar_evidence.cases()


@pytest.fixture(scope="session")
def dit_ar_baseline(dit_ar_evidence):
    """The baseline's summary, manifest-verified."""
    try:
        return dit_ar_evidence.baseline()
    except Refused as exc:
        _fail_refused(exc)


@pytest.fixture(scope="session")
def dit_ar_quality(dit_ar_evidence, dit_ar_baseline):
    """The candidate's quality assessment under its effective class."""
    try:
        return dit_ar_evidence.quality()
    except CandidateCrash as exc:
        pytest.fail(f"candidate crashed: {exc}\n{exc.details[-3000:]}", pytrace=False)
    except Refused as exc:  # a setup error (e.g. a required metric's weights are missing)
        _fail_refused(exc)


@pytest.fixture(scope="session")
def dit_ar_pipeline(dit_ar_session):
    """The working tree's pipeline built in this process through the seam (for exploration only;
    verdicts never use it: they come from worker processes)."""
    from ..worker.server import import_model

    return import_model(dit_ar_session.root).build_pipeline(dit_ar_session.lane.workload(dit_ar_session.root))


@pytest.fixture
def dit_ar_worker(dit_ar_evidence) -> Iterator[Any]:
    """A started worker with the working tree's pipeline built (for timing a generate round trip)."""
    log = dit_ar_evidence.run_dir / "worker-benchmark.log"
    try:
        with dit_ar_evidence.launcher.worker("candidate", dit_ar_evidence.candidate_root, log) as worker:
            worker.request("build", spec=dit_ar_evidence.spec(dit_ar_evidence.candidate_root))
            yield worker
    except CandidateCrash as exc:
        dit_ar_evidence.record_crash(exc)
        pytest.fail(f"candidate crashed: {exc}\n{exc.details[-3000:]}", pytrace=False)


def parametrize_cases(metafunc: pytest.Metafunc, state: PluginSession) -> None:
    """`dit_ar_case`: one parameter per corpus case, with the case id as the test id."""
    from dit_ar_contract.config import load_config
    from quality_suite.corpora import load_corpus

    from ..state.session import session_lane_name

    config = load_config(state.config_path)
    lane = config.lanes[session_lane_name(config, state.lane)]
    cases = load_corpus(config.root / lane.corpus)
    metafunc.parametrize("dit_ar_case", cases, ids=[c.id for c in cases])
