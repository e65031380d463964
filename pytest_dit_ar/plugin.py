"""The pytest plugin: options, markers, fixtures and, with --dit-ar-experiment, the verdict.

Without --dit-ar-experiment (plain `pytest -m quality`, `-m perf`, an IDE click on one test) the
suites run against the baseline and nothing touches git. With it, the whole required test set must
be selected; the plugin guards, judges, records and keeps or resets the candidate commit.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from .config import CLASSES, DEFAULT_CONFIG
from .errors import EXIT_REFUSED, CandidateCrash, Refused

SUITES = ("quality_suite", "perf_suite")
OPTIONS = {  # option dest -> (ini name, help)
    "dit_ar_experiment": ("dit_ar_experiment", "judge HEAD as one candidate commit (keep or reset it)"),
    "dit_ar_classification": ("dit_ar_classification", f"declared class of the change: {', '.join(CLASSES)}"),
    "dit_ar_description": ("dit_ar_description", "one line saying what the candidate changes"),
    "dit_ar_config": ("dit_ar_config", f"path of the session contract (default {DEFAULT_CONFIG})"),
    "dit_ar_lane": ("dit_ar_lane", "lane to run (default: the session's lane or the config's default)"),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dit-ar", "pytest-dit-ar research loop")
    group.addoption("--dit-ar-experiment", action="store_true", default=None, help=OPTIONS["dit_ar_experiment"][1])
    group.addoption("--dit-ar-classification", choices=CLASSES, default=None, help=OPTIONS["dit_ar_classification"][1])
    group.addoption("--dit-ar-description", default=None, help=OPTIONS["dit_ar_description"][1])
    group.addoption("--dit-ar-config", default=None, help=OPTIONS["dit_ar_config"][1])
    group.addoption("--dit-ar-lane", default=None, help=OPTIONS["dit_ar_lane"][1])
    for dest, (ini, help_text) in OPTIONS.items():
        parser.addini(ini, help_text, type="bool" if dest == "dit_ar_experiment" else "string", default=None)


def option(config: pytest.Config, dest: str) -> Any:
    """Command-line value, else the ini value."""
    value = config.getoption(dest)
    if value is None:
        value = config.getini(OPTIONS[dest][0]) or None
    return value


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "quality: quality gate of the model under test against the baseline")
    config.addinivalue_line("markers", "perf: performance of the model under test (timed out of process)")
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU")
    config.pluginmanager.register(DitAr(config), "dit-ar-state")
    from .timers import default_benchmark_timer

    default_benchmark_timer(config)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """GPU name, driver, CUDA and torch versions and the lane in pytest-benchmark's machine info."""
    from .timers import machine_info as dit_ar_machine_info

    state = config.pluginmanager.get_plugin("dit-ar-state")
    machine_info.update(dit_ar_machine_info(state.config_path, state.lane) if state else {})


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


class DitAr:
    """Per-session state of the plugin."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.config_path = Path(option(config, "dit_ar_config") or DEFAULT_CONFIG)
        if not self.config_path.is_absolute():
            self.config_path = Path(config.rootpath) / self.config_path
        self.lane = option(config, "dit_ar_lane")
        self.classification = option(config, "dit_ar_classification")
        self.description = option(config, "dit_ar_description")
        self.experiment_mode = bool(option(config, "dit_ar_experiment")) and not config.option.collectonly \
            and not _is_xdist_worker(config)
        self.experiment = None
        self.deselected: list[pytest.Item] = []
        self.outcomes: dict[str, dict[str, str]] = {"quality": {}, "perf": {}}
        self.refusal: str | None = None
        self.last_line: str | None = None
        self._plain_judgement = None

    # -- collection -----------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """In experiment mode only the two suites are collected (the project's own tests are not)."""
        if not self.experiment_mode:
            return None
        root = Path(config.rootpath)
        try:
            rel = collection_path.resolve().relative_to(root.resolve())
        except ValueError:
            return True
        if not rel.parts:
            return None
        return None if rel.parts[0] in SUITES else True

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Quality before performance: performance is only worth measuring for a candidate that passed.
        pytest-benchmark tests come last, after the A/B verdict test."""
        items.sort(key=lambda it: 0 if it.get_closest_marker("quality") else
                   2 if "benchmark" in getattr(it, "fixturenames", ()) else 1)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected.extend(items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not self.experiment_mode:
            return
        from .experiment import Experiment

        try:
            self._check_request(session)
            self.experiment = Experiment(self.config_path, self.lane, self.classification, self.description)
            verdict = self.experiment.begin()
        except Refused as exc:
            self.refusal = str(exc)
            if self.experiment is not None:
                self.experiment.release()
            pytest.exit(f"dit-ar refused: {exc}", returncode=EXIT_REFUSED)
        if verdict is not None:  # scope discard before anything ran
            self.last_line = verdict.line
            pytest.exit("dit-ar: " + "; ".join(verdict.reasons), returncode=verdict.exit_code)

    def _check_request(self, session: pytest.Session) -> None:
        """Refuse an experiment that is not exactly the whole required test set, or lacks its inputs."""
        opt = self.config.option
        if session.testsfailed:
            raise Refused("collection failed (see the errors above); nothing was judged")
        if not self.classification:
            raise Refused(f"--dit-ar-classification is required ({', '.join(CLASSES)})")
        if not self.description or not self.description.strip():
            raise Refused("--dit-ar-description is required: say in one line what the candidate changes")
        partial = {"-k": opt.keyword, "-m": opt.markexpr, "--lf": getattr(opt, "lf", False),
                   "--sw": getattr(opt, "stepwise", False), "-x/--maxfail": opt.maxfail,
                   "-n (xdist)": getattr(opt, "numprocesses", None), "--deselect": self.deselected,
                   "--benchmark-skip": getattr(opt, "benchmark_skip", False),
                   "--benchmark-only": getattr(opt, "benchmark_only", False)}
        used = [name for name, value in partial.items() if value]
        if used:
            raise Refused(f"an experiment runs the whole required test set; remove {', '.join(used)}")
        for arg in self.config.args:
            if "::" in arg or Path(arg).is_file():
                raise Refused(f"an experiment runs the whole required test set; node id or file {arg!r} "
                              "selects part of it")
        root = Path(self.config.rootpath)
        collected = {Path(str(item.path)).resolve() for item in session.items}
        required = {p.resolve() for suite in SUITES for p in (root / suite).rglob("test_*.py")}
        missing = sorted(str(p.relative_to(root.resolve())) for p in required - collected)
        if missing:
            raise Refused(f"an experiment runs the whole required test set; not selected: {missing}")

    # -- running --------------------------------------------------------------------------
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        marker = "quality" if "quality" in report.keywords else "perf" if "perf" in report.keywords else None
        if marker is None:
            return
        if report.when == "call" or report.outcome != "passed":
            previous = self.outcomes[marker].get(report.nodeid)
            if previous in (None, "passed"):
                self.outcomes[marker][report.nodeid] = report.outcome

    def judgement(self):
        """The session's Judgement: the experiment's, or in plain mode one against the baseline."""
        if self.experiment is not None and self.experiment.judgement is not None:
            return self.experiment.judgement
        if self._plain_judgement is None:
            self._plain_judgement = _plain_judgement(self)
        return self._plain_judgement

    # -- finishing ------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        exp = self.experiment
        if exp is None or exp.judgement is None or exp.verdict is not None:
            return
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            self.refusal = "interrupted: nothing was recorded and HEAD was left as it was"
            session.exitstatus = EXIT_REFUSED
            return
        exp.judgement.close()
        verdict = exp.conclude(exp.decide(self.outcomes))
        self.last_line = verdict.line
        session.exitstatus = verdict.exit_code

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        exp = self.experiment
        if exp is None or exp.verdict is None:
            return
        tr = terminalreporter
        tr.section("dit-ar experiment")
        tr.write_line(f"run {exp.run_id}  lane {exp.ctx.lane_id}  commit {exp.commit[:10]} (parent {exp.parent[:10]})")
        j = exp.judgement
        if j is not None and j._quality is not None:
            q = j._quality
            tr.write_line(f"class: declared {q.declared_class}, effective {q.effective_class}"
                          + (f" ({'; '.join(q.audit_reasons)})" if q.audit_reasons else ""))
            tr.write_line(f"quality: {q.headline()}")
        for reason in exp.verdict.reasons[:10]:
            tr.write_line(f"- {reason}")
        action = "kept as the new best" if exp.verdict.status == "keep" else f"reset to {exp.parent[:10]}"
        tr.write_line(f"{action}; evidence in {exp.run_dir}")

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._plain_judgement is not None:
            self._plain_judgement.close()
        if self.experiment is not None:
            self.experiment.release()
        if self.refusal:
            _last_line(f"REFUSED: {self.refusal.splitlines()[0]}")
        elif self.last_line:
            _last_line(self.last_line)


def _last_line(text: str) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    print(text, flush=True)


def _plain_judgement(state: DitAr):
    from .context import load_context
    from .judgement import Judgement

    ctx = load_context(state.config_path, state.lane)
    run_dir = ctx.paths.runs / "plain-pytest"
    best_root = ctx.paths.best_worktree if ctx.paths.best_worktree.is_dir() else None
    return Judgement(ctx, state.classification or "exact", run_dir, best_root)


# -- fixtures ------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def dit_ar(request: pytest.FixtureRequest) -> DitAr:
    """The plugin's state for this session."""
    return request.config.pluginmanager.get_plugin("dit-ar-state")


@pytest.fixture(scope="session")
def dit_ar_judgement(dit_ar: DitAr):
    """Evidence about the working tree's pipeline (experiment or plain mode); refusals fail loudly."""
    try:
        return dit_ar.judgement()
    except Refused as exc:
        pytest.fail(f"dit-ar: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def dit_ar_context(dit_ar_judgement):
    return dit_ar_judgement.ctx


@pytest.fixture(scope="session")
def dit_ar_config(dit_ar_context):
    """The validated session contract."""
    return dit_ar_context.config


@pytest.fixture(scope="session")
def dit_ar_device(dit_ar_context):
    """The pinned device of the lane (its identity is recorded in session.json)."""
    return dit_ar_context.target


@pytest.fixture(scope="session")
def dit_ar_corpus(dit_ar_judgement):
    """The lane's frozen corpus, checksum-verified."""
    return dit_ar_judgement.cases()


@pytest.fixture(scope="session")
def dit_ar_baseline(dit_ar_judgement):
    """The baseline's summary, manifest-verified."""
    try:
        return dit_ar_judgement.baseline()
    except Refused as exc:
        pytest.fail(f"dit-ar: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def dit_ar_quality(dit_ar_judgement, dit_ar_baseline):
    """The candidate's quality evidence under its effective class."""
    try:
        return dit_ar_judgement.quality()
    except CandidateCrash as exc:
        pytest.fail(f"candidate crashed: {exc}\n{exc.details[-3000:]}", pytrace=False)
    except Refused as exc:  # a setup error (e.g. a required metric's weights are missing)
        pytest.fail(f"dit-ar: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def dit_ar_pipeline(dit_ar_context):
    """The working tree's pipeline built in this process through the seam (for exploration only;
    verdicts never use it: they come from worker processes)."""
    from .worker import import_model

    return import_model(dit_ar_context.root).build_pipeline(dit_ar_context.lane.workload(dit_ar_context.root))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize `dit_ar_case` with the lane's corpus so each case has a readable test id."""
    if "dit_ar_case" not in metafunc.fixturenames:
        return
    from quality_suite.corpora import load_corpus

    from .config import load_config
    from .state import session_lane

    state: DitAr = metafunc.config.pluginmanager.get_plugin("dit-ar-state")
    config = load_config(state.config_path)
    lane = config.lane(state.lane or session_lane(config.root) or config.default_lane)
    cases = load_corpus(config.root / lane.corpus)
    metafunc.parametrize("dit_ar_case", cases, ids=[c.id for c in cases])

