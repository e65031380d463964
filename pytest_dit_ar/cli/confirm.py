"""The best's confirmation on fresh seeds as `dit-ar summary` and `dit-ar report` run it first
(loop/revalidate.py `confirm_best`): when the best is approximate or quantization against the original baseline and
no confirmation of it is stored. It says so on the terminal (stderr) while it runs; `--no-confirm` leaves it out."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dit_ar_contract.errors import CandidateCrash, Refused

HELP = ("do not confirm the best on fresh seeds first (when it is approximate or quantization against the original "
        "baseline and has no confirmation yet, the text says `not confirmed (skipped)`)")


def add_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-confirm", action="store_true", help=HELP)


def say(line: str) -> None:
    print(f"dit-ar: {line}", file=sys.stderr, flush=True)


def when_needed(config: Path, lane: str | None = None) -> str:
    """Run the confirmation when the best needs one and has none stored; "" when it ran or was not needed, else
    why it did not run (a refusal, a worker that failed), which the text then gives."""
    from ..loop.revalidate import confirm_best

    try:
        confirm_best(config, lane, out=say)
    except Refused as exc:
        say(f"the best was not confirmed: {exc}")
        return str(exc)
    except CandidateCrash as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        say(f"the best was not confirmed: a worker failed ({first}); nothing was recorded")
        return f"a worker failed while it ran: {first}"
    return ""
