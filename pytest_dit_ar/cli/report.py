"""`dit-ar report`: write the session's (or one run's) HTML page with its PNG figures and print its path."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import confirm


def run(args: argparse.Namespace) -> int:
    """The CLI verb: write the page and print its path."""
    from ..report.page import run_report, session_report  # matplotlib, Jinja2: only for this verb

    out = args.out.resolve() if args.out else None
    if args.run:
        page = run_report(args.config, args.run, out)
    else:
        skipped = args.no_confirm
        page = session_report(args.config, out, skipped, "" if skipped else confirm.when_needed(args.config))
    print(page)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `dit-ar report`."""
    p = sub.add_parser("report", help="HTML + PNG report of the session or of one run",
                       description="Write a static HTML page with PNG figures (progress, timing, image grids, "
                                   "stage attribution, the ledger, the best confirmed on fresh seeds: run first when "
                                   "it needs it) and print its path.")
    p.add_argument("--run", metavar="RUN_ID", help="report one run (default page: runs/RUN_ID/report.html)")
    p.add_argument("--out", type=Path, metavar="DIR", help="folder for the page and its report_files/")
    confirm.add_flag(p)
    p.set_defaults(func=run)
    return p
