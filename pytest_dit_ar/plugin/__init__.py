"""The pytest plugin: options, markers and hooks. Each hook is one call into `PluginSession` (the collection
hooks into its `Collection`, collection.py); the fixtures live in `fixtures.py`. With --dit-ar-experiment the
run judges HEAD (see session.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from .fixtures import (
    dit_ar,
    dit_ar_baseline,
    dit_ar_baseline_case,
    dit_ar_candidate_case,
    dit_ar_case,
    dit_ar_config,
    dit_ar_corpus,
    dit_ar_device,
    dit_ar_evidence,
    dit_ar_pipeline,
    dit_ar_quality,
    dit_ar_session,
    dit_ar_worker,
    parametrize_cases,
)
from .session import OPTIONS, PluginSession
from .terminal import HeldOutput

__all__ = ["dit_ar", "dit_ar_baseline", "dit_ar_baseline_case", "dit_ar_candidate_case", "dit_ar_case", "dit_ar_config",
           "dit_ar_corpus", "dit_ar_device", "dit_ar_evidence", "dit_ar_pipeline", "dit_ar_quality", "dit_ar_session",
           "dit_ar_worker"]
ALIASES = ("dit-ar", "dit_ar")  # the distribution's name (pytest's header) and the entry point's: -p no:<either>
STATE = "dit-ar-state"


def _state(config: pytest.Config) -> _Hooks | None:
    return config.pluginmanager.get_plugin(STATE)


def _disabled(config: pytest.Config) -> bool:
    """`-p no:dit-ar` disables the plugin like `-p no:dit_ar` (pytest itself knows only the second)."""
    return any(config.pluginmanager.is_blocked(name) for name in ALIASES)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dit-ar", "pytest-dit-ar research loop")
    group.addoption("--dit-ar-experiment", action="store_true", default=None, help=OPTIONS["dit_ar_experiment"])
    group.addoption("--dit-ar-classification", default=None, help=OPTIONS["dit_ar_classification"])
    group.addoption("--dit-ar-description", default=None, help=OPTIONS["dit_ar_description"])
    group.addoption("--dit-ar-config", default=None, help=OPTIONS["dit_ar_config"])
    group.addoption("--dit-ar-lane", default=None, help=OPTIONS["dit_ar_lane"])
    group.addoption("--dit-ar-unsandboxed", action="store_true", default=False,
                    help="run the workers without the bubblewrap sandbox (recorded in the ledger; command line only)")
    group.addoption("--dit-ar-judge-only", action="store_true", default=False,
                    help="judge only: write the outcome into the run folder, leave git and the ledger (a fleet's "
                         "judge in its slot; the session's own process records it; command line only)")
    group.addoption("--dit-ar-run-id", default=None, help="the run id to judge under (a fleet's dispatch names it)")
    group.addoption("--dit-ar-held-output", action="store_true", default=False,
                    help="hold pytest's output until the experiment starts; a refusal prints only its line and its "
                         "way out (`dit-ar experiment` passes it)")
    for dest, help_text in OPTIONS.items():
        parser.addini(dest, help_text, type="bool" if dest == "dit_ar_experiment" else "string", default=None)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """The plugin's configuration. First of all plugins: with `--dit-ar-held-output` stdout becomes a HeldOutput
    before pytest's terminal reporter is made with it as its file (plugin/terminal.py; the plugin's session puts
    stdout back at the end)."""
    if _disabled(config):
        return
    if config.getini("dit_ar_experiment"):
        raise pytest.UsageError("dit_ar_experiment is set in the ini file; an experiment can reset HEAD, so it is "
                                "asked for on the command line only (--dit-ar-experiment): remove the ini key")
    config.addinivalue_line("markers", "quality: quality gate of the model under test against the baseline")
    config.addinivalue_line("markers", "perf: performance of the model under test (timed out of process)")
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU")
    if config.getoption("dit_ar_held_output"):
        sys.stdout = HeldOutput(sys.stdout)
    config.pluginmanager.register(_Hooks(PluginSession(config)), STATE)
    from .benchmark import default_benchmark_timer

    default_benchmark_timer(config)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """GPU name, driver, CUDA and torch versions and the lane in pytest-benchmark's machine info."""
    from .benchmark import machine_info as dit_ar_machine_info

    hooks = _state(config)
    if hooks is not None:
        machine_info.update(dit_ar_machine_info(hooks.session.config_path, hooks.session.lane))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize `dit_ar_case` with the lane's corpus so each case has a readable test id."""
    hooks = _state(metafunc.config)
    if "dit_ar_case" in metafunc.fixturenames and hooks is not None:
        parametrize_cases(metafunc, hooks.session)


class _Hooks:
    """The hooks that need the run's state, registered as a plugin object of their own."""

    def __init__(self, session: PluginSession):
        self.session = session

    @pytest.hookimpl(tryfirst=True)
    def pytest_ignore_collect(self, collection_path: Path) -> bool | None:
        return self.session.collection.ignores(collection_path)

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.session.collection.order(items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.session.collected(session)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.session.collection.deselected.extend(items)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Any:
        report = yield
        self.session.raised(item, call)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.session.reported(report)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.session.finish(session, exitstatus)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        self.session.summary(terminalreporter)

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.session.unconfigure()
