"""`dit-ar summary --markdown`: the session as a PR-ready text (report/summary.py), printed or written."""

from __future__ import annotations

import argparse
from pathlib import Path

from dit_ar_contract.config import repo_root_for
from dit_ar_contract.errors import Refused

from ..state.paths import StatePaths
from . import confirm


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("summary", help="PR-ready text of the session: the kept chain, discards, re-validation, stack",
                       description="The session as Markdown: the chain from the original baseline to the best (class, "
                                   "estimate, interval, quality of each keep), the best confirmed on fresh seeds "
                                   "(run first when it needs it), the discarded ideas grouped by reason, the "
                                   "re-validated cumulative speed-up and holdout result, device and software.")
    p.add_argument("--markdown", action="store_true", help="Markdown (the one format; the flag says so explicitly)")
    p.add_argument("--time", action="store_true",
                   help="add where each experiment's wall time went, by phase (start-up, quality corpus, quality "
                        "judging, warm-up, timed rounds, round checks, close, harness, other), its warm-up rounds and "
                        "what it reused of the best")
    p.add_argument("--lane", help="lane id (default: the session's)")
    p.add_argument("--out", type=Path, metavar="FILE", help="write the text to FILE instead of printing it")
    confirm.add_flag(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    root = repo_root_for(args.config)
    paths = StatePaths(root)
    if not paths.session.is_file():
        raise Refused(f"no session in {paths.dir}: run `dit-ar init` and `dit-ar baseline` first")
    if args.out is not None and args.out.is_dir():
        raise Refused(f"--out {args.out} is a folder: give a file name, e.g. {args.out / 'summary.md'}")
    from ..report.summary import markdown  # loaded for this verb only (the parser is built for every verb)

    skipped = getattr(args, "no_confirm", False)
    why_not = "" if skipped else confirm.when_needed(args.config, args.lane)
    text = markdown(root, args.lane, time=getattr(args, "time", False), skipped=skipped, why_not=why_not)
    if args.out is None:
        print(text, end="")
    else:
        args.out.write_text(text, encoding="utf-8")
        print(args.out)
    return 0
