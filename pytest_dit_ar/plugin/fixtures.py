"""The plugin's fixtures (listed with `pytest --fixtures`; README: "Write your own checks").

They hand out the run's evidence and what it was computed from; none exposes the plugin's private state,
and none lets a test change a verdict. Three kinds of failure are kept apart:
* a refusal (no session, a broken config, a missing metric's weights) stops the run once, exit 2;
* a crash of the candidate fails the test and is the candidate's CRASH;
* any other exception is the harness's own error: the test fails, and an experiment is not judged
  (exit 2, nothing recorded, HEAD kept) instead of blaming the candidate.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from dit_ar_contract.errors import EXIT_REFUSED, CandidateCrash, Refused

from ..state.baseline import cases_dir
from .session import REFUSED_EXIT, PluginSession


def _guarded(state: PluginSession, compute: Callable[[], Any]) -> Any:
    """Run harness code for a fixture and sort its failures into refusal, crash or harness error."""
    try:
        return compute()
    except Refused as exc:
        state.ending.refuse(exc, replace=True)
        pytest.exit(REFUSED_EXIT, returncode=EXIT_REFUSED)
    except CandidateCrash as exc:
        pytest.fail(f"candidate crashed: {exc}\n{exc.details[-3000:]}", pytrace=False)
    except Exception as exc:  # the harness's own error: never the candidate's verdict
        state.harness_error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-4000:]}"
        pytest.fail(f"dit-ar harness error (not the candidate's): {type(exc).__name__}: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def dit_ar(request: pytest.FixtureRequest) -> PluginSession:
    """The plugin's state for this run: options, experiment mode, the tests' outcomes so far."""
    hooks = request.config.pluginmanager.get_plugin("dit-ar-state")
    if hooks is None:
        pytest.fail("the dit-ar plugin is disabled in this run (-p no:dit-ar): its fixtures give nothing; "
                    "drop the option to use them", pytrace=False)
    return hooks.session


@pytest.fixture(scope="session")
def dit_ar_evidence(dit_ar: PluginSession):
    """The run's evidence about the working tree: in an experiment the candidate commit's, in a plain run the
    working tree's (committed or not) against the session's baseline. Quality and speed are computed on
    first use (`.quality()`, `.performance()`) and then read-only (`.quality_result`, `.performance_result`)."""
    return _guarded(dit_ar, dit_ar.evidence)


@pytest.fixture(scope="session")
def dit_ar_session(dit_ar_evidence):
    """The loaded session: the validated config, the lane, its pinned device, the state paths and
    session.json's record (tag, branch, baseline commit)."""
    return dit_ar_evidence.session


@pytest.fixture(scope="session")
def dit_ar_config(dit_ar_session):
    """The validated session contract (typed: `.lanes[name].quality.numerical.min_psnr_db`, ...)."""
    return dit_ar_session.config


@pytest.fixture(scope="session")
def dit_ar_device(dit_ar_session):
    """Where the lane runs: its ledger id, device identity, and whether it is the target GPU."""
    return dit_ar_session.target


@pytest.fixture(scope="session")
def dit_ar_corpus(dit_ar, dit_ar_evidence):
    """The lane's frozen corpus (checksum-verified): a list of cases with id, prompt, seed and label."""
    return _guarded(dit_ar, dit_ar_evidence.cases)


@pytest.fixture(scope="session")
def dit_ar_baseline(dit_ar, dit_ar_evidence):
    """The baseline's summary (baseline.json), verified against its manifest: envelope, task metrics, timing."""
    return _guarded(dit_ar, dit_ar_evidence.baseline)


@pytest.fixture(scope="session")
def dit_ar_quality(dit_ar, dit_ar_evidence, dit_ar_baseline):
    """The candidate's quality assessment under its effective class (per-case checks, aggregate checks)."""
    return _guarded(dit_ar, dit_ar_evidence.quality)


@pytest.fixture
def dit_ar_case(request: pytest.FixtureRequest):
    """One case of the lane's frozen corpus (id, prompt, seed, label); a test that uses it runs once per
    case, with the case id as its test id (`test_x[digit7-s1071]`)."""
    return request.param


@dataclass(frozen=True)
class CaseArtifacts:
    """What the baseline stored for one case: its image [3, H, W] in [0, 1], its latent and the PNG."""

    case_id: str
    image: Any
    latent: Any
    png: Any


@pytest.fixture
def dit_ar_baseline_case(dit_ar, dit_ar_evidence, dit_ar_case) -> CaseArtifacts:
    """The baseline's image, latent and PNG path for `dit_ar_case` (read from the verified baseline)."""
    def load() -> CaseArtifacts:
        images, latents = dit_ar_evidence.baseline_cases([dit_ar_case])
        folder = cases_dir(dit_ar_evidence.session.baseline_dir)
        return CaseArtifacts(dit_ar_case.id, images[dit_ar_case.id], latents[dit_ar_case.id],
                             folder / f"{dit_ar_case.id}.png")
    return _guarded(dit_ar, load)


@pytest.fixture
def dit_ar_candidate_case(dit_ar, dit_ar_evidence, dit_ar_case) -> CaseArtifacts:
    """The candidate's image and latent for `dit_ar_case`, as the harness read them from the candidate's worker
    (in a plain run the working tree's; png is None: candidate images are written only for failing cases)."""
    def load() -> CaseArtifacts:
        outputs = dit_ar_evidence.candidate().outputs
        return CaseArtifacts(dit_ar_case.id, outputs.images[dit_ar_case.id], outputs.latents[dit_ar_case.id], None)
    return _guarded(dit_ar, load)


@pytest.fixture(scope="session")
def dit_ar_pipeline(dit_ar, dit_ar_session):
    """The working tree's pipeline built in this process through the seam (for exploration in a plain run only;
    verdicts never use it: they come from sandboxed worker processes, and an experiment refuses it)."""
    from ..worker.server import import_model

    if dit_ar.experiment_mode:
        _guarded(dit_ar, _refuse_in_process_model)
    return import_model(dit_ar_session.root).build_pipeline(dit_ar_session.lane.workload(dit_ar_session.root))


def _refuse_in_process_model() -> None:
    raise Refused("dit_ar_pipeline builds the candidate inside the harness's process; an experiment never does "
                  "that (use dit_ar_candidate_case or dit_ar_quality)")


@pytest.fixture
def dit_ar_worker(dit_ar, dit_ar_evidence) -> Iterator[Any]:
    """A started worker with the working tree's pipeline built, for timing a generate round trip
    (`worker.generate(requests)` returns the harness's time and the outputs it read)."""
    log = dit_ar_evidence.run.worker_log("benchmark")
    worker = _guarded(dit_ar, lambda: dit_ar_evidence.launcher.worker("candidate", dit_ar_evidence.candidate_root,
                                                                       log).start())
    try:
        _guarded(dit_ar, lambda: worker.request("build", spec=dit_ar_evidence.spec(dit_ar_evidence.candidate_root)))
        yield worker
    finally:
        worker.close()


def parametrize_cases(metafunc: pytest.Metafunc, state: PluginSession) -> None:
    """`dit_ar_case`: one parameter per corpus case, with the case id as the test id. A broken config or
    corpus stops the run once with the same one-line refusal `dit-ar status` gives."""
    from dit_ar_contract.config import load_config
    from quality_suite.corpora import load_corpus

    from ..state.session import session_lane_name

    try:
        config = load_config(state.config_path)
        lane = config.lanes[session_lane_name(config, state.lane)]
        cases = load_corpus(config.root / lane.corpus)
    except Refused as exc:  # raised here it would be a collection error with pytest's traceback: stop after
        state.ending.refuse(exc)  # collection instead (PluginSession.collected), once
        cases = []
    metafunc.parametrize("dit_ar_case", cases, ids=[c.id for c in cases], indirect=True)
