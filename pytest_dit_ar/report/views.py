"""The report's view data: what the page templates render, typed (frozen dataclasses filled by page.py from
the state's typed records; the templates escape every value on output)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..state.best import BestRecord
from ..state.paths import StatePaths
from ..state.session import SessionRecord

ASSETS = "report_files"  # the folder of figures beside a page
MAX_RUNS = 30  # runs shown in detail on the session page (newest first); `--run ID` shows any run


@dataclass(frozen=True)
class StatusStyle:
    """A status word and its colour (the ledger row and run section colours)."""

    word: str
    colour: str


@dataclass(frozen=True)
class Style:
    """What the style sheet takes from the code: status colours and the ledger columns that wrap (1-based)."""

    statuses: tuple[StatusStyle, ...]
    wrapped_columns: tuple[int, ...]


@dataclass(frozen=True)
class Figure:
    """A PNG in the assets folder, linked relative to the page."""

    src: str
    alt: str


@dataclass(frozen=True)
class Row:
    """A table row: its cells as text and its CSS class."""

    cells: tuple[str, ...]
    css: str = ""


@dataclass(frozen=True)
class Table:
    """A table with a header row."""

    header: tuple[str, ...]
    rows: tuple[Row, ...]
    css: str = ""


@dataclass(frozen=True)
class Fact:
    """One line of a lane's summary table."""

    name: str
    value: str


@dataclass(frozen=True)
class LaneHeader:
    """A lane's id and summary (device, best commit, baseline metrics, noise floor, counts)."""

    lane_id: str
    facts: tuple[Fact, ...]


@dataclass(frozen=True)
class ProfileView:
    """The lane's latest profile: not found, found without stage times (`figure` None), or shown."""

    found: bool
    where: str = ""
    figure: Figure | None = None
    facts: Table | None = None
    ops: Table | None = None
    arithmetic: str = ""  # the best's achieved TFLOP/s and share of the card's peak (its own profile), or why none


@dataclass(frozen=True)
class CaseImages:
    """The worst cases' images: the figure (if any) and which images are missing."""

    figure: Figure | None
    candidates_missing: bool
    baseline_missing: bool


@dataclass(frozen=True)
class QualityView:
    """A run's quality.json: class audit, failed checks, worst cases (`images` None: all pixel-identical)."""

    found: bool
    declared: str = ""
    effective: str = ""
    audit: str = ""
    failed_count: int = 0
    more_failures: tuple[str, ...] = ()
    worst: Table | None = None
    images: CaseImages | None = None
    tests: Table | None = None  # the paired task-score tests: each estimate with its one-sided bound


@dataclass(frozen=True)
class PerfView:
    """A run's timing: distribution figure, per-segment table, wall time, reasons (`figure` None: no timing)."""

    figure: Figure | None
    table: Table | None = None
    wall_time: str = ""
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunView:
    """Everything one run left behind; `missing_folder` names the run folder when it is gone."""

    run_id: str
    status: str
    description: str
    line: str
    reasons: tuple[str, ...]
    run_dir: str
    missing_folder: str = ""
    crash: str | None = None
    quality: QualityView | None = None  # None for a baseline run (it is the reference)
    perf: PerfView | None = None
    logs: tuple[str, ...] = ()


@dataclass(frozen=True)
class LaneSection:
    """One lane on the session page."""

    header: LaneHeader
    progress: Figure
    profile: ProfileView
    runs: tuple[RunView, ...]


@dataclass(frozen=True)
class SessionPage:
    """The session page (index.html)."""

    title: str
    state_dir: str
    row_count: int
    lanes: tuple[LaneSection, ...]
    ledger: Table | None
    assets: str = ASSETS
    max_runs: int = MAX_RUNS
    summary: str = ""  # the PR-ready summary.md written beside the page (report/summary.py)
    warnings: tuple[str, ...] = ()  # e.g. a re-validation that disagrees with the product of the kept steps


@dataclass(frozen=True)
class RunPage:
    """One run's page (report.html)."""

    title: str
    header: LaneHeader
    run: RunView
    ledger: Table | None


@dataclass(frozen=True)
class ReportContext:
    """What every part of a page reads: the repo root, state paths, session, best commits, target name."""

    root: Path
    paths: StatePaths
    session: SessionRecord | None
    best: dict[str, BestRecord]
    target_name: str
    confirm_skipped: bool = False  # the best's confirmation was left out (`--no-confirm`)
    confirm_why_not: str = ""  # why it did not run (a refusal), if it did not

    def is_session_lane(self, lane_id: str) -> bool:
        return self.session is not None and self.session.lane_id == lane_id
