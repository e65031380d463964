"""The `dit-ar` command. Exit codes: 0 success/KEEP, 1 DISCARD or CRASH (after the reset), 2 refused (its `way out:`
line says what to do). The task guides: `dit-ar guide`."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from pathlib import Path

from dit_ar_contract.errors import EXIT_REFUSED, Refused

from .. import __version__

UNSANDBOXED = ("run the workers without the bubblewrap sandbox (a candidate can then reach the harness's files; "
               "recorded in the ledger and the report)")


def _config_arg(parser: argparse.ArgumentParser, top: bool) -> None:
    from dit_ar_contract.config import DEFAULT_CONFIG

    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG if top else argparse.SUPPRESS,
                        help=f"session contract (default {DEFAULT_CONFIG})")


class _PrintCompletion(argparse.Action):
    """`--print-completion SHELL`: shtab's script for the whole parser (shtab imported only when asked)."""

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001 - argparse's signature
        import shtab

        print(shtab.complete(parser, shell=values))
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    from dit_ar_contract.classes import WORDS as CLASSES

    from . import calibrate, demo, fleet, guide, profile, report, scaffold, search, summary, watch

    parser = argparse.ArgumentParser(prog="dit-ar", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--print-completion", action=_PrintCompletion, choices=("bash", "zsh", "tcsh"),
                        help="print a shell completion script (bash, zsh, tcsh)")
    _config_arg(parser, top=True)
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(name: str, help_text: str, func) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        _config_arg(p, top=False)
        p.set_defaults(func=func)
        return p

    verb("doctor", "device, driver and software versions, the target contract, what can run here", _doctor)
    p = verb("init", "create or validate branch autoresearch/<tag> and the session state", _init)
    p.add_argument("--tag", help="session tag (branch autoresearch/<tag>); default: today's date")
    p.add_argument("--lane", help="lane to run (default: the config's default_lane)")
    p.add_argument("--new-baseline", action="store_true",
                   help="start at a commit other than the lane's recorded baseline: it becomes the new reference "
                        "for quality (recorded in the ledger)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where this session's judgings run: here (local, the default) or in a slot of a Ray "
                        "cluster (ray; `dit-ar fleet up` sets this); stored in the session, never chosen later")
    p.add_argument("--address", default="auto", help="with --executor ray: the Ray cluster (default: the one "
                   "running here)")
    p.add_argument("--slot", default="", help="with --executor ray: the slot (FLEET:slot-N) to bind the session to "
                   "(default: a slot of its own)")
    p = verb("baseline", "run the unmodified pipeline: artifacts, noise envelope, timing", _baseline)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--unsandboxed", action="store_true", help=UNSANDBOXED)
    _judge_args(p)
    p = verb("experiment", "judge HEAD (one commit on the current best): keep it or reset it", _experiment)
    p.add_argument("--classification", required=True, choices=CLASSES, help="declared class of the change")
    p.add_argument("--description", required=True, help="one line saying what the commit changes")
    p.add_argument("--lane", help=argparse.SUPPRESS)
    p.add_argument("--unsandboxed", action="store_true", help=UNSANDBOXED)
    _judge_args(p)
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p = verb("status", "lane, best commit, recent ledger rows and failures", _status)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--rows", type=int, default=10, help="how many recent ledger rows to show")
    p.add_argument("--all", action="store_true", help="the session of every git worktree of this repository "
                   "(sessions side by side, one per GPU)")
    p = verb("recover", "restore the branch to the recorded best and a damaged baseline from its git copy", _recover)
    p.add_argument("--before", metavar="COMMIT", help="move the best and the branch back to the best before this keep "
                   "(the way back past a role-dependent best; the commits after it stay in `git reflog`)")
    p = verb("case", "one corpus case by hand: the seed this session gives it and its image (PNG)", _case)
    p.add_argument("case_id", metavar="ID", help="a corpus case id (as in the test ids), or <id>-r<k> for a replica")
    p.add_argument("--baseline", action="store_true", help="the original baseline's stored image instead of one "
                   "generated now by the current best")
    p.add_argument("--out", type=Path, help="folder for the PNG (default .autoresearch/cases/)")
    p.add_argument("--unsandboxed", action="store_true", help=UNSANDBOXED)
    p = verb("revalidate", "time the best against the original baseline again (fresh workers) and judge the holdout; "
                           "never moves the best", _revalidate)
    p.add_argument("--unsandboxed", action="store_true", help=UNSANDBOXED)
    _judge_args(p)
    for module in (search, profile, report, demo, calibrate, watch, summary, fleet):
        _config_arg(module.add_parser(sub), top=False)
    scaffold.add_parser(sub)  # writes config/autoresearch.json at the git root: takes no --config
    guide.add_parser(sub)  # reads the installed guides only: takes no --config
    return parser


def _judge_args(parser: argparse.ArgumentParser) -> None:
    """A fleet's judge runs the verb in its replica with these (fleet/work.py); never typed by hand."""
    parser.add_argument("--judge-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--run-id", default="", help=argparse.SUPPRESS)


def _fleet_driver(args: argparse.Namespace):  # noqa: ANN202 - a fleet.driver.Driver, imported on use
    """The session's fleet driver when its judgings run in a slot (and this is not the judge), else None."""
    if getattr(args, "judge_only", False):
        return None
    from ..fleet.route import driver

    return driver(args.config)


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import doctor

    return doctor(args.config)


def _init(args: argparse.Namespace) -> int:
    if args.executor == "ray":
        from ..fleet.route import bind

        return bind(args.config, args.tag, args.lane, args.address, args.slot, new_baseline=args.new_baseline)
    from ..loop.init_session import init

    return init(args.config, args.tag, args.lane, new_baseline=args.new_baseline)


def _baseline(args: argparse.Namespace) -> int:
    fleet = _fleet_driver(args)
    if fleet is not None:
        return fleet.verb("baseline", ("baseline", *(["--quiet"] if args.quiet else []),
                                       *(["--unsandboxed"] if args.unsandboxed else [])))
    from ..loop.baseline import run_baseline

    return run_baseline(args.config, progress=not args.quiet, sandboxed=not args.unsandboxed,
                        judge_only=args.judge_only, run_id=args.run_id)


def experiment_pytest_args(config: Path, classification: str, description: str, lane: str | None,
                           unsandboxed: bool = False) -> list[str]:
    """The pytest invocation that `dit-ar experiment` wraps (the two are the same thing)."""
    from dit_ar_contract.config import repo_root_for

    from ..loop.guards.suites import suite_files

    root = repo_root_for(config)
    args = ["--dit-ar-experiment", "--dit-ar-classification", classification, "--dit-ar-description", description,
            "--dit-ar-config", str(config.resolve()), "--rootdir", str(root),
            "-W", "ignore::pytest.PytestAssertRewriteWarning", str(root)]
    args += [str(p) for p in suite_files().outside(root)]  # suites installed outside the root (a user's repo)
    if lane:
        args[:0] = ["--dit-ar-lane", lane]
    if unsandboxed:
        args[:0] = ["--dit-ar-unsandboxed"]
    return args


def _experiment(args: argparse.Namespace) -> int:
    extra = [a for a in args.pytest_args if a != "--"]
    fleet = _fleet_driver(args)
    if fleet is not None:  # the session judges in its slot (`init --executor ray`)
        code = fleet.experiment(args.classification, args.description, tuple(extra), args.unsandboxed)
        if code == 0:
            _revalidate_when_due(args, fleet)
        return code
    import pytest

    judge = ["--dit-ar-judge-only", *(["--dit-ar-run-id", args.run_id] if args.run_id else [])] \
        if args.judge_only else []
    # a refusal is its line and its way out, without pytest's banner (plugin/terminal.py's HeldOutput)
    code = pytest.main(["--dit-ar-held-output"] + judge + experiment_pytest_args(
        args.config, args.classification, args.description, args.lane, args.unsandboxed) + extra)
    if int(code) == 0 and not args.judge_only:  # a keep: every `revalidate_every` keeps the chain is timed again
        _revalidate_when_due(args)
    return int(code)


def _revalidate_when_due(args: argparse.Namespace, fleet=None) -> None:  # noqa: ANN001 - a fleet Driver or None
    from ..loop.revalidate import due, revalidate

    try:
        if due(args.config, args.lane):
            print("dit-ar: re-validating the chain (every `revalidate_every` keeps; the verdict above stands)")
            if fleet is not None:
                fleet.verb("revalidation", ("revalidate", *(["--unsandboxed"] if args.unsandboxed else [])))
            else:
                revalidate(args.config, args.lane, sandboxed=not args.unsandboxed)
    except Refused as exc:  # the keep is recorded; say why the re-validation did not run
        print(f"dit-ar revalidate: refused: {exc}", file=sys.stderr)


def _revalidate(args: argparse.Namespace) -> int:
    fleet = _fleet_driver(args)
    if fleet is not None:
        return fleet.verb("revalidation", ("revalidate", *(["--unsandboxed"] if args.unsandboxed else [])))
    from ..loop.revalidate import revalidate

    return revalidate(args.config, sandboxed=not args.unsandboxed, judge_only=args.judge_only, run_id=args.run_id)


def _status(args: argparse.Namespace) -> int:
    from .status import status

    return status(args.config, as_json=args.json, rows=args.rows, every_worktree=args.all)


def _case(args: argparse.Namespace) -> int:
    from ..loop.case import write_case

    made = write_case(args.config, args.case_id, args.baseline, args.out, sandboxed=not args.unsandboxed)
    case = made.case
    print(f"case {case.id}: {case.prompt!r}" + (f" (label {case.label})" if case.label is not None else ""))
    print(f"seed: {made.seed} in this session (corpus seed {case.seed}, keyed by the session's secret: each session "
          "has its own seeds, so a candidate cannot recognise the corpus)")
    print(f"image: {made.png} ({made.source})")
    print(f"by hand: build_pipeline(spec).generate([({case.prompt!r}, {made.seed})]) with the lane's workload")
    return 0


def _recover(args: argparse.Namespace) -> int:
    from .status import recover, rewind

    return rewind(args.config, args.before) if args.before else recover(args.config)


def main(argv: list[str] | None = None) -> int:
    if (sys.argv[1:] if argv is None else argv) == ["--version"]:  # answered before any module is imported
        print(f"dit-ar {__version__}")
        return 0
    try:
        args = build_parser().parse_args(argv)  # --print-completion writes from inside the parser
        try:
            return args.func(args)
        except Refused as exc:
            print(f"dit-ar {args.verb}: refused: {exc}", file=sys.stderr)
            way = exc.way_out or (_session_way_out(args.config) if args.verb in JUDGING_VERBS else "")
            if way:
                print(f"way out: {way}", file=sys.stderr)
            return EXIT_REFUSED
    except BrokenPipeError:  # `dit-ar status | head -1`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


JUDGING_VERBS = ("experiment", "recover")  # their refusals may leave a commit no verdict judged


def _session_way_out(config: Path) -> str:
    from ..state.way_out import session_way_out

    try:
        return session_way_out(config)
    except Exception:  # noqa: BLE001 - a way out is advice; the refusal itself is already printed
        return ""


def entry() -> int:
    """The console script and `python -m pytest_dit_ar.cli`: `main`, then a quick exit. After torch is imported
    the interpreter's last garbage collections take 1.2-2 s (measured here: 1.41 s -> 0.24 s); `gc.freeze()`
    moves what is alive into the permanent generation they skip. Everything else of the exit (atexit handlers,
    flushing, thread joins) runs as usual. Not in `main`: tests call it in-process."""
    code = main()
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(entry())
