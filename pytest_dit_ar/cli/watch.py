"""`dit-ar watch`: a live terminal view of the session, from another terminal.

It reads the state files only (live.json, results.tsv, best.json; never a lock, never git), so it can run at
any time beside an experiment, and it survives the experiment ending or crashing: a run whose live.json stays
unfinished while its process is gone is shown as ended without a verdict. `--once` draws one frame and exits.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from dit_ar_contract.config import repo_root_for
from dit_ar_contract.errors import Refused

from ..report.summary import revalidation_warning, session_rows
from ..state import ledger
from ..state.best import read_best
from ..state.live import LiveState, read_live
from ..state.paths import StatePaths
from ..state.runs import read_session


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("watch", help="live view of the running experiment, the latest ledger rows and the best",
                       description="A live terminal view of the session (reads the state files only, never a lock): "
                                   "the running experiment's phase, segments, estimate and interval, time "
                                   "breakdown, the latest ledger rows and the best. Ctrl-C leaves.")
    p.add_argument("--once", action="store_true", help="draw one frame and exit")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between frames (default 1)")
    p.add_argument("--rows", type=int, default=8, help="latest ledger rows shown (default 8)")
    p.set_defaults(func=run)
    return p


def _run_state(live: LiveState | None) -> Text:
    if live is None:
        return Text("no experiment has run in this session yet", style="dim")
    if live.finished:
        style = "green" if live.verdict in ("KEEP", "REVALIDATED") else "yellow"
        return Text(f"{live.kind} {live.run_id} finished: {live.verdict or 'no verdict'}", style=style)
    if not live.writer_alive():
        return Text(f"{live.kind} {live.run_id} ended without a verdict (process {live.pid} is gone: a crash, a kill "
                    "or Ctrl-C); `dit-ar status` shows what HEAD is now", style="bold red")
    return Text(f"{live.kind} {live.run_id} running (process {live.pid}), phase {live.phase}", style="bold cyan")


def live_panel(live: LiveState | None, now: float) -> Panel:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("state", _run_state(live))
    if live is not None:
        table.add_row("commit", f"{live.commit[:10]}  {live.description}")
        table.add_row("lane", live.lane)
        seg = f"{live.segment} done of at most {live.max_segments or '?'}"
        if live.phase == "timing" and live.rounds_per_segment:
            seg += f"; segment {live.segment + 1}: round {live.rounds_done}/{live.rounds_per_segment}"
        table.add_row("segments", seg)
        if live.estimate_pct is not None:
            table.add_row("estimate", f"{live.estimate_pct:+.2f}% [{live.lower_pct:+.2f}%, {live.upper_pct:+.2f}%] "
                                      "(positive = faster)")
        spent = ", ".join(f"{k.replace('_', ' ')} {v:.0f} s" for k, v in live.seconds.items() if k != "total")
        table.add_row("time", f"{now - live.started:.0f} s since start" + (f"; {spent}" if spent else ""))
        table.add_row("updated", f"{now - live.updated:.0f} s ago")
    return Panel(table, title="running", border_style="cyan")


def ledger_table(rows: list[ledger.LedgerRow], count: int) -> Table:
    table = Table(title=f"latest {min(count, len(rows))} ledger rows", expand=True)
    for name in ("time", "status", "commit", "class", "estimate", "description"):
        table.add_column(name, overflow="fold")
    for row in rows[-count:]:
        table.add_row(row.timestamp[11:19], row.status.word, row.commit[:10], row.effective_class or
                      row.declared_class or "-",
                      f"{row.improvement_pct:+.2f}%" if row.improvement_pct is not None else "-", row.description)
    return table


def frame(root: Path, count: int, now: float | None = None) -> Group:
    """One frame of the view, from the state files of the session at `root`."""
    paths = StatePaths(root)
    now = time.time() if now is None else now
    try:
        session = read_session(paths)
    except (ValueError, TypeError, KeyError):  # a state file being repaired: the next frame reads it again
        session = None
    lane = session.lane_id if session is not None else ""
    try:
        rows = session_rows(ledger.read(paths.ledger), lane) if lane else []
    except Refused:  # a ledger that is not one: the frame shows the rest
        rows = []
    try:
        best = read_best(paths).get(lane)
    except (ValueError, TypeError, KeyError):  # a state file being repaired: the next frame reads it again
        best = None
    tag = session.tag if session is not None and session.tag else "?"
    head = Text(f"session {tag}  lane {lane or '?'}  state {paths.dir}", style="bold")
    parts: list = [head, live_panel(read_live(paths.live), now)]
    best_line = (f"best {best.commit[:10]} (effective class {best.effective_class}, run {best.run_id})" if best
                 else "no best yet (run `dit-ar baseline`)")
    parts.append(Text(best_line, style="green"))
    warning = revalidation_warning(root, rows)
    if warning:
        parts.append(Text(warning, style="bold red"))
    parts.append(ledger_table(rows, count))
    return Group(*parts)


def run(args: argparse.Namespace) -> int:
    if args.rows < 1 or not 0.1 <= args.interval <= 3600:
        raise Refused("--rows must be at least 1 and --interval between 0.1 and 3600 seconds")
    root = repo_root_for(args.config)
    if not StatePaths(root).session.is_file():
        raise Refused(f"no session in {StatePaths(root).dir}: run `dit-ar init` there first (or pass --config "
                      "of the session to watch)")
    console = Console()
    if args.once:
        console.print(frame(root, args.rows))
        return 0
    try:
        with Live(frame(root, args.rows), console=console, refresh_per_second=4, screen=False) as view:
            while True:
                time.sleep(args.interval)
                view.update(frame(root, args.rows))
    except KeyboardInterrupt:
        return 0
