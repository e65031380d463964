"""The plugin's per-run state, with verbs named for pytest's phases (collect, report, finish, summary).

Without --dit-ar-experiment (plain `pytest -m quality`, `-m perf`, an IDE click on one test) the suites
run against the baseline and nothing touches git. With it, the whole required test set must be
selected; the session guards, judges, records and keeps or resets the candidate commit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dit_ar_contract.classes import MILDEST
from dit_ar_contract.classes import WORDS as CLASSES
from dit_ar_contract.config import DEFAULT_CONFIG
from dit_ar_contract.errors import EXIT_REFUSED, CandidateCrash, Refused

from ..loop.guards.suites import MARKERS, SuiteFiles, suite_files
from ..state.way_out import session_way_out
from .collection import Collection, cases_needed
from .ending import Ending
from .terminal import held_output, show_progress

REFUSED_EXIT = "dit-ar refused (the reason and the way out are the last lines)"
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
        from ..loop.guards.outcomes import TestOutcomes

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
        self.judge_only = bool(config.getoption("dit_ar_judge_only"))  # a fleet's judge (fleet/)
        self.run_id = config.getoption("dit_ar_run_id") or ""
        self.experiment = None
        self.keeper_started = False  # the next experiment's warm servers were asked for (start_next_servers)
        self.outcomes = TestOutcomes()
        self.ending = Ending(held_output())  # the refusal or verdict line the run ends with (plugin/ending.py)
        self.harness_error: str | None = None  # an exception in the harness's own code (not the candidate's)
        self.selected_cases: set[str] | None = None  # plain runs generate only the cases their tests need
        self._plain = None
        self.suites: SuiteFiles = suite_files()
        self.failed_ids: list[str] = []  # failing suite tests, as node ids that can be pasted back
        self.collection = Collection(config, self.suites, self.experiment_mode)  # rewrites the arguments

    # -- collection (plugin/collection.py) ----------------------------------------------------------
    def collected(self, session: pytest.Session) -> None:
        """Start the experiment once the selection is known (refuse, or discard on scope, before anything runs).
        In a plain run, note which corpus cases the selected tests need, so only those are generated."""
        if not self.experiment_mode:
            if self.ending.refusal:  # noted while collecting (a broken config or corpus, an unknown lane)
                pytest.exit(REFUSED_EXIT, returncode=EXIT_REFUSED)
            self.selected_cases = cases_needed(session.items)
            return
        try:
            problem = self.collection.refusal(session, self.classification, self.description)
            if problem:
                raise Refused(problem)
            refuse_unless_frozen_touch(self.ending, self.config_path)
            from ..loop.experiment import Experiment  # torch and the suites: only for an experiment that starts

            self.experiment = Experiment(self.config_path, self.lane, self.classification, self.description,
                                         sandboxed=not self.unsandboxed, judge_only=self.judge_only,
                                         run_id=self.run_id)
            # a broken config or corpus noted while collecting is refused there, unless the commit broke it
            verdict = self.experiment.begin(self.ending.refused())
        except Refused as exc:
            self.ending.refuse(exc, replace=True)
            if self.experiment is not None:
                self.experiment.release()
            self.ending.drop(session)
            pytest.exit(REFUSED_EXIT, returncode=EXIT_REFUSED)
        if verdict is not None:  # scope discard before anything ran: its reasons are in the summary, once
            from .summary import prerun_lines

            self.ending.verdict_before_the_run(verdict.line, prerun_lines(self.experiment), session)
            pytest.exit(f"dit-ar: {verdict.status.verdict_word} before any candidate code ran (the reasons are above)",
                        returncode=verdict.exit_code)
        self.ending.started()
        show_progress(self.config, self.experiment.evidence, self.experiment.session.lane.performance)
        from ..state.live import Tee

        # the timed rounds also go to live.json, for `dit-ar watch` in another terminal
        self.experiment.evidence.progress = Tee(self.experiment.evidence.progress, self.experiment.live)

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
            self._plain = plain_evidence(self.config_path, self.lane, self.classification,
                                         not self.unsandboxed, self.selected_cases)
            show_progress(self.config, self._plain, self._plain.session.lane.performance)
        return self._plain

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
                self.ending.last_line = guarded.line
                session.exitstatus = guarded.exit_code
                return
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            self.ending.refuse(Refused("interrupted: nothing was recorded and HEAD was left as it was; run the "
                                       "experiment again"))
            session.exitstatus = EXIT_REFUSED
            return
        if self.harness_error:
            self.ending.refuse(Refused("the harness failed (not the candidate): " + self.harness_error.splitlines()[0]
                                       + "; nothing was recorded and HEAD was kept; please report it"), replace=True)
            session.exitstatus = EXIT_REFUSED
            return
        exp.evidence.close()
        from ..loop.experiment import check_roles, conclude_timed
        try:
            check_roles(exp)  # the best against itself, side-blind, when this run calls for it
        except Refused as exc:  # the best is role-dependent: nothing is judged against it
            self.ending.refuse(exc)
            session.exitstatus = EXIT_REFUSED
            return
        start_next_servers(self, exp)  # no worker of this run is left: their imports overlap the recording
        verdict = conclude_timed(exp, self.outcomes)
        self.ending.last_line = verdict.line
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
            exp = self.experiment
            exp.release()
            if exp.verdict is not None:  # a verdict that came without the early start (a crash before timing)
                start_next_servers(self, exp)
        ending = self.ending
        ending.write(session_way_out(self.config_path) if ending.refusal and self.experiment_mode else "")


def start_next_servers(plugin: PluginSession, exp: Any) -> None:
    """Start the next experiment's warm fork servers, detached, once this run's workers are all gone (the timing
    and the role check done): the keeper's imports overlap the guards after the run and the recording, never a
    timed round. Once a run; a refused or interrupted run starts none; a run whose keeper started beside its
    quality run (`performance.warm_servers_early`) starts no second one."""
    from ..loop.speed import warm_servers

    if not plugin.keeper_started and exp.session is not None and exp.sandboxed and not exp.judge_only:
        plugin.keeper_started = True
        if exp.evidence is not None and exp.evidence.workers.next.pid is not None:
            return  # started beside the quality run (performance.warm_servers_early), ready or still starting
        warm_servers.start_next(exp.session, exp.config_path)


def refuse_unless_frozen_touch(ending: Ending, config_path: Path) -> None:
    """A broken config or corpus noted while collecting is refused at once (git and state only: nothing heavy is
    imported), unless HEAD's commit touched frozen paths: then it is the commit's scope discard, which the
    experiment records (`Experiment.begin`)."""
    refused = ending.refused()
    if refused is not None:
        from ..loop.guards.frozen import touched

        if touched(config_path) is None:
            raise refused


def plain_evidence(config_path: Path, lane: str | None, classification: str | None, sandboxed: bool,
                   case_ids: set[str] | None):
    """A plain run's evidence: the working tree against the baseline (and the best, where its worktree is), in a
    run folder of its own; sandboxed where the machine can (a plain run decides nothing)."""
    from ..loop.evidence import Evidence
    from ..loop.workers.launch import sandbox_problem
    from ..state.paths import new_run_id
    from ..state.session import open_session

    session = open_session(config_path, lane)
    best_root = session.paths.best_worktree if session.paths.best_worktree.is_dir() else None
    run_dir = session.paths.run(new_run_id("plain"))
    return Evidence(session, classification or MILDEST.word, run_dir, best_root,
                    sandboxed=sandboxed and sandbox_problem() is None, case_ids=case_ids)


def harness_error(nodeid: str, call: pytest.CallInfo) -> str | None:
    """What a suite test's phase ending in `call` says about the harness: None for a pass or an expected
    outcome (a failed check, the candidate's crash, a skip, a refusal), otherwise the error in one line."""
    if call.excinfo is None or call.excinfo.errisinstance(EXPECTED_OUTCOMES):
        return None
    return f"{nodeid} ({call.when}): {call.excinfo.exconly()[:500]}"

