"""The plugin's per-run state, with verbs named for pytest's phases (collect, report, finish, summary).

Without --dit-ar-experiment (plain `pytest -m quality`, `-m perf`, an IDE click on one test) the suites
run against the baseline and nothing touches git. With it, the whole required test set must be
selected; the session guards, judges, records and keeps or resets the candidate commit.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from dit_ar_contract.classes import MILDEST
from dit_ar_contract.classes import WORDS as CLASSES
from dit_ar_contract.config import DEFAULT_CONFIG
from dit_ar_contract.errors import EXIT_REFUSED, CandidateCrash, Refused

from ..loop import selection
from ..loop.selection import selects_suites
from ..loop.suites import MARKERS, SUITES, SuiteFiles, suite_files

REFUSED_EXIT = "dit-ar refused (the reason is the last line)"
# what a suite test may end with: a failed check (assert, pytest.fail), the candidate's crash (its worker died,
# raised, ran out of memory), a skip, an exit (a refusal); anything else is the harness's own error
EXPECTED_OUTCOMES = (AssertionError, CandidateCrash, pytest.fail.Exception, pytest.skip.Exception,
                     pytest.exit.Exception, KeyboardInterrupt)
OPTIONS = {  # option dest -> help
    "dit_ar_experiment": "judge HEAD as one candidate commit (keep or reset it)",
    "dit_ar_classification": f"declared class of the change: {', '.join(CLASSES)}",
    "dit_ar_description": "one line saying what the candidate changes",
    "dit_ar_config": f"path of the session contract (default {DEFAULT_CONFIG})",
    "dit_ar_lane": "lane to run (default: the session's lane or the config's default)",
}


def option(config: pytest.Config, dest: str) -> Any:
    """Command-line value, else the ini value."""
    value = config.getoption(dest)
    if value is None:
        value = config.getini(dest) or None
    return value


class PluginSession:
    """What one pytest run of the plugin knows: its options, the experiment (if any) and the outcomes."""

    def __init__(self, config: pytest.Config):
        from ..loop.outcomes import TestOutcomes

        self.config = config
        self.config_path = Path(option(config, "dit_ar_config") or DEFAULT_CONFIG)
        if not self.config_path.is_absolute():
            self.config_path = Path(config.rootpath) / self.config_path
        self.lane = option(config, "dit_ar_lane")
        self.classification = option(config, "dit_ar_classification")
        self.description = option(config, "dit_ar_description")
        self.experiment_mode = bool(option(config, "dit_ar_experiment")) and not config.option.collectonly \
            and not hasattr(config, "workerinput")
        self.unsandboxed = bool(config.getoption("dit_ar_unsandboxed"))
        self.experiment = None
        self.deselected: list[pytest.Item] = []
        self.outcomes = TestOutcomes()
        self.refusal: str | None = None
        self.harness_error: str | None = None  # an exception in the harness's own code (not the candidate's)
        self.last_line: str | None = None
        self.selected_cases: set[str] | None = None  # plain runs generate only the cases their tests need
        self._plain = None
        self.suites: SuiteFiles = suite_files()
        self._inner_suites: tuple[Path, ...] = ()  # installed suites added as arguments that lie inside the root
        self.failed_ids: list[str] = []  # failing suite tests, as node ids that can be pasted back
        self._resolve_node_ids()
        self._add_installed_suites()

    def _resolve_node_ids(self) -> None:
        """A pasted suite node id that is not a path here (`test_quality.py::...` printed in a wheel-installed
        project) names the installed suite module."""
        from .node_ids import resolve_suite_args

        self.config.args[:] = resolve_suite_args(list(self.config.args), Path(self.config.invocation_params.dir),
                                                 self.suites)

    def _add_installed_suites(self) -> None:
        """Suites installed outside the rootdir (a user's repository) are never found by collecting it: an
        experiment, and a plain run whose `-m` asks for the suites without naming paths, gets their
        folders as arguments. In this repository the suites are under the root and nothing is added."""
        root = Path(self.config.rootpath)
        cwd = Path(self.config.invocation_params.dir)
        self.config.args[:] = [self.suites.redirect(arg, root, cwd) for arg in self.config.args]
        opt = self.config.option
        wanted = self.experiment_mode or (selects_suites(opt.markexpr or "") and
                                          self.config.args_source != pytest.Config.ArgsSource.ARGS)
        if wanted:
            known = {Path(arg).resolve() for arg in self.config.args if "::" not in arg}
            self.config.args.extend(str(p) for p in self.suites.outside(root) if p not in known)
        named = {Path(arg).resolve() for arg in self.config.args if "::" not in arg}
        base = root.resolve()
        self._inner_suites = tuple(p for p in self.suites.outside(root) if base in p.parents and p in named)

    def _way_to_inner_suites(self, collection_path: Path) -> bool | None:
        """Suites installed inside the root below a folder pytest never enters (the README's `.venv/`):
        pytest 8+ collects overlapping arguments as one tree, so the root's own walk decides, and it skips the
        venv, suites and all (`pytest -m quality` collected nothing). The folders on the way down to a suite
        are entered (False) and everything else in the skipped folder stays out (True); None elsewhere."""
        if not self._inner_suites:
            return None
        resolved = collection_path.resolve()
        # a link on the way (a venv's lib64 -> lib) would collect the suites twice: only the real folders
        if not collection_path.is_symlink() and any(resolved in folder.parents for folder in self._inner_suites):
            return False
        base = Path(self.config.rootpath).resolve()
        tops = {base / folder.relative_to(base).parts[0] for folder in self._inner_suites}
        if any(resolved == top or top in resolved.parents for top in tops) and not self.suites.contains(resolved):
            return True
        return None

    # -- collection -------------------------------------------------------------------------------
    def ignores(self, collection_path: Path) -> bool | None:
        """In experiment mode only the two suites are collected (the project's own tests are not); in any
        mode the tree's own copies of the suites are not when the harness is installed from elsewhere (a
        second worktree or clone: the installed copies run instead)."""
        root = Path(self.config.rootpath)
        if self.suites.in_shadowed(collection_path, root):
            return True
        way = self._way_to_inner_suites(collection_path)
        if way is not None:
            return way
        if not self.experiment_mode:
            return None
        if self.suites.contains(collection_path):
            return None
        try:
            rel = collection_path.resolve().relative_to(root.resolve())
        except ValueError:
            return True
        if not rel.parts:
            return None
        return None if rel.parts[0] in SUITES else True

    def order(self, items: list[pytest.Item]) -> None:
        """Quality before performance (speed is only worth measuring for a candidate that passed);
        pytest-benchmark tests last, after the A/B verdict test. Inside an experiment the benchmark tests
        are skipped before their workers start: they decide nothing, and the verdict's own timed rounds
        are the experiment's measurement (perf.json)."""
        items.sort(key=lambda it: 0 if it.get_closest_marker("quality") else
                   2 if "benchmark" in getattr(it, "fixturenames", ()) else 1)
        if self.experiment_mode:
            skip = pytest.mark.skip(reason="inside an experiment the verdict's timed rounds are the measurement "
                                           "(perf.json); publish with `pytest -m perf --benchmark-autosave`")
            for item in items:
                if "benchmark" in getattr(item, "fixturenames", ()):
                    item.add_marker(skip)

    def collected(self, session: pytest.Session) -> None:
        """Start the experiment once the selection is known (refuse, or discard on scope, before anything runs).
        In a plain run, note which corpus cases the selected tests need, so only those are generated."""
        if self.refusal:  # noted while collecting (a broken config or corpus, an unknown lane)
            pytest.exit(REFUSED_EXIT, returncode=EXIT_REFUSED)
        if not self.experiment_mode:
            cased = [item for item in session.items if "dit_ar_case" in getattr(item, "fixturenames", ())]
            whole = [item for item in session.items if {"dit_ar_quality", "dit_ar_corpus"} &
                     set(getattr(item, "fixturenames", ())) and "dit_ar_case" not in item.fixturenames]
            if cased and not whole:
                self.selected_cases = {item.callspec.params["dit_ar_case"].id for item in cased}
            return
        from ..loop.experiment import Experiment

        try:
            self._check_request(session)
            self.experiment = Experiment(self.config_path, self.lane, self.classification, self.description,
                                         sandboxed=not self.unsandboxed)
            verdict = self.experiment.begin()
        except Refused as exc:
            self.refusal = str(exc)
            if self.experiment is not None:
                self.experiment.release()
            pytest.exit(REFUSED_EXIT, returncode=EXIT_REFUSED)
        if verdict is not None:  # scope discard before anything ran
            self.last_line = verdict.line
            pytest.exit("dit-ar: " + "; ".join(verdict.reasons), returncode=verdict.exit_code)
        self._show_progress(self.experiment.evidence, self.experiment.session.lane.performance)
        from ..state.live import Tee

        # the timed rounds also go to live.json, for `dit-ar watch` in another terminal
        self.experiment.evidence.progress = Tee(self.experiment.evidence.progress, self.experiment.live)

    def _show_progress(self, evidence: Any, protocol: Any) -> None:
        """The evidence's phases and timed rounds on the terminal while the tests run (a bar on a terminal, one
        line per phase in a pipe), written past pytest's output capture."""
        from ..loop.live import Live
        from ..loop.progress import TimingProgress

        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        stream = _ReporterStream(reporter, self.config.pluginmanager.get_plugin("capturemanager"))
        tty = bool(reporter.isatty)
        evidence.live = Live(stream, tty)
        evidence.progress = TimingProgress(stream, tty, protocol.rounds, protocol.max_segments)

    def _check_request(self, session: pytest.Session) -> None:
        """Refuse an experiment that is not exactly the whole required test set, or lacks its inputs."""
        problem = selection.refusal(self._request(session), self.suites.tests, Path(self.config.rootpath).resolve())
        if problem:
            raise Refused(problem)

    def _request(self, session: pytest.Session) -> selection.Request:
        """What this run asked for, in pytest's options and its collection."""
        opt = self.config.option
        narrowing = {"-k": opt.keyword, "-m": opt.markexpr, "--lf": getattr(opt, "lf", False),
                     "--sw": getattr(opt, "stepwise", False), "-x/--maxfail": opt.maxfail,
                     "-n (xdist)": getattr(opt, "numprocesses", None), "--deselect": self.deselected,
                     "--benchmark-skip": getattr(opt, "benchmark_skip", False),
                     "--benchmark-only": getattr(opt, "benchmark_only", False)}
        arguments = tuple(selection.Argument(arg, Path(arg).resolve() if Path(arg).is_file() else None)
                          for arg in self.config.args)
        return selection.Request(self.classification, self.description, narrowing, arguments,
                                 frozenset(Path(str(item.path)).resolve() for item in session.items),
                                 bool(session.testsfailed))

    # -- running -----------------------------------------------------------------------------------
    def raised(self, item: pytest.Item, call: pytest.CallInfo) -> None:
        """A suite test that raised something other than a failed check or an outcome (a fixture that does not
        exist, a KeyError in the suite's own code) is the harness's error, never the candidate's failure."""
        if not any(item.get_closest_marker(m) for m in MARKERS):
            return
        if self.harness_error is None:
            self.harness_error = harness_error(item.nodeid, call)
        if call.excinfo is not None and call.excinfo.errisinstance(AssertionError) and len(self.failed_ids) < 50:
            from .node_ids import pasteable

            self.failed_ids.append(pasteable(item.path, item.nodeid, self.config.invocation_params.dir))

    def reported(self, report: pytest.TestReport) -> None:
        marker = next((m for m in MARKERS if m in report.keywords), None)
        if marker is not None and (report.when == "call" or report.outcome != "passed"):
            self.outcomes.record(marker, report.nodeid, report.outcome)

    def evidence(self):
        """The run's evidence: the experiment's, or in plain mode the working tree against the baseline."""
        if self.experiment is not None and self.experiment.evidence is not None:
            return self.experiment.evidence
        if self._plain is None:
            self._plain = self._plain_evidence()
        return self._plain

    def _plain_evidence(self):
        from ..loop.evidence import Evidence, sandbox_problem
        from ..state.paths import new_run_id
        from ..state.session import open_session

        session = open_session(self.config_path, self.lane)
        best_root = session.paths.best_worktree if session.paths.best_worktree.is_dir() else None
        run_dir = session.paths.run(new_run_id("plain"))
        sandboxed = not self.unsandboxed and sandbox_problem() is None  # a plain run decides nothing
        evidence = Evidence(session, self.classification or MILDEST.word, run_dir, best_root, sandboxed=sandboxed,
                            case_ids=self.selected_cases)
        self._show_progress(evidence, session.lane.performance)
        return evidence

    # -- finishing ---------------------------------------------------------------------------------
    def finish(self, session: pytest.Session, exitstatus: int) -> None:
        """Judge, record and keep or reset; set the exit status."""
        exp = self.experiment
        if exp is None or exp.evidence is None or exp.verdict is not None:
            return
        if exitstatus == pytest.ExitCode.INTERRUPTED or self.harness_error:
            exp.evidence.close()
            guarded = exp.guard_before_refusal()  # what the candidate changed is judged before any refusal
            if guarded is not None:
                self.last_line = guarded.line
                session.exitstatus = guarded.exit_code
                return
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            self.refusal = self.refusal or "interrupted: nothing was recorded and HEAD was left as it was"
            session.exitstatus = EXIT_REFUSED
            return
        if self.harness_error:
            self.refusal = ("the harness failed (not the candidate): " + self.harness_error.splitlines()[0] +
                            "; nothing was recorded and HEAD was kept; please report it")
            session.exitstatus = EXIT_REFUSED
            return
        exp.evidence.close()
        verdict = exp.conclude(exp.judge(self.outcomes))
        self.last_line = verdict.line
        session.exitstatus = verdict.exit_code

    def summary(self, tr: Any) -> None:
        """The terminal summary: failing cases, plain runs' speed, the experiment's verdict (plugin/summary.py)."""
        from . import summary

        evidence = self.experiment.evidence if self.experiment else self._plain
        summary.write(tr, evidence, self.experiment, speed=not self.experiment_mode, failed_ids=self.failed_ids)

    def unconfigure(self) -> None:
        if self._plain is not None:
            self._plain.close()
        if self.experiment is not None:
            self.experiment.release()
        if self.refusal:
            _last_line("REFUSED: " + one_line(self.refusal))
        elif self.last_line:
            _last_line(self.last_line)


def harness_error(nodeid: str, call: pytest.CallInfo) -> str | None:
    """What a suite test's phase ending in `call` says about the harness: None for a pass or an expected
    outcome (a failed check, the candidate's crash, a skip, a refusal), otherwise the error in one line."""
    if call.excinfo is None or call.excinfo.errisinstance(EXPECTED_OUTCOMES):
        return None
    return f"{nodeid} ({call.when}): {call.excinfo.exconly()[:500]}"


def one_line(text: str) -> str:
    """A multi-line reason (a list of files, say) folded into the one last line a refusal prints."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines[:1] + ["; ".join(lines[1:])] if len(lines) > 1 else lines)


def _last_line(text: str) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    print(text, flush=True)


class _ReporterStream:
    """A file-like view of pytest's terminal reporter that writes past the output capture (as pytest's live
    logging does): a test's own capture would otherwise hold the progress until the test ends."""

    def __init__(self, reporter: Any, capman: Any = None):
        self.reporter = reporter
        self.capman = capman

    def write(self, text: str) -> None:
        if self.capman is None:
            self._write(text)
            return
        with self.capman.global_and_fixture_disabled():
            self._write(text)

    def _write(self, text: str) -> None:
        self.reporter.ensure_newline()  # not after a test file's dots: pytest starts its line again afterwards
        self.reporter.write(text, flush=True)

    def flush(self) -> None:
        """The reporter flushes each write."""
