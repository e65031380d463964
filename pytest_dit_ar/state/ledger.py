"""results.tsv: the append-only ledger of every baseline and experiment (docs/design/state-and-recovery.md), one
typed row each.

The first 17 columns are docs/design/state-and-recovery.md's; `reason` (the verdict's rule in words) and
`flags` (how the run was made, e.g. `unsandboxed`) were added later. A ledger whose header has only the first 17 columns
(a session made by an earlier version) is still read, and rows are appended to it in its own columns.

The speed columns are two different statistics: `best_before` and `candidate` are each side's *median* batch
latency over its own timed rounds (as the lane's primary metric), unpaired; `improvement_pct` is the verdict's
*paired estimate* (the trimmed mean of each round's candidate/best ratio, positive = faster). On a drifting
machine the two can disagree in direction; the verdict uses the paired one.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status

from .writer import refuse_in_judge

LOCK_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class LedgerRow:
    timestamp: str
    run_id: str
    lane: str
    commit: str
    parent: str
    status: Status
    declared_class: str = ""
    effective_class: str = ""
    metric: str = ""
    best_before: float | None = None
    candidate: float | None = None
    improvement_pct: float | None = None
    p_value: float | None = None
    peak_vram_mb: float | None = None
    quality_summary: str = ""
    description: str = ""
    run_dir: str = ""
    reason: str = ""
    flags: str = ""

    def cells(self, columns: tuple[str, ...]) -> list[str]:
        return [cell(getattr(self, c)) for c in columns]

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: numbers stay numbers, the status is its ledger word."""
        return {f.name: (self.status.word if f.name == "status" else getattr(self, f.name))
                for f in dataclasses.fields(self)}

    @classmethod
    def from_cells(cls, columns: list[str], cells: list[str]) -> LedgerRow:
        values: dict[str, object] = {}
        for name, text in zip(columns, cells):
            if name == "status":
                values[name] = Status.from_word(text)
            elif name in NUMBERS:
                values[name] = _number(text)
            else:
                values[name] = text
        return cls(**values)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> LedgerRow:
        """The row `as_dict` wrote (e.g. into experiment.json); unknown keys are left out."""
        values = {name: data[name] for name in COLUMNS if name in data}
        values["status"] = Status.from_word(str(data.get("status")))
        for name in NUMBERS & values.keys():
            number = values[name]
            values[name] = float(number) if isinstance(number, (int, float)) and not isinstance(number, bool) \
                else None
        return cls(**values)


COLUMNS = tuple(f.name for f in dataclasses.fields(LedgerRow))
COLUMNS_V1 = COLUMNS[:17]
NUMBERS = frozenset({"best_before", "candidate", "improvement_pct", "p_value", "peak_vram_mb"})


def cell(value: object) -> str:
    """A value as the ledger's text (floats to 6 significant digits, None as empty)."""
    if value is None:
        return ""
    if isinstance(value, Status):
        return value.word
    if isinstance(value, float):
        return f"{value:.6g}"
    return " ".join(str(value).replace("\t", " ").split())


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def _header(path: Path) -> tuple[str, ...] | None:
    """The column names of an existing ledger, None for a new or empty one."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    with open(path, encoding="utf-8") as fh:
        first = fh.readline().rstrip("\n").split("\t")
    for columns in (COLUMNS, COLUMNS_V1):
        if tuple(first) == columns:
            return columns
    raise Refused(f"{path}: the header row is not a ledger header (expected {COLUMNS})",
                  way_out=f"move {path.name} aside (the next row starts a new ledger) or put the ledger back")


def append(path: Path, row: LedgerRow) -> None:
    """Append one row under a file lock in a single write; a torn tail from a kill is set aside first."""
    refuse_in_judge(f"the ledger {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S):
            _repair_tail(path)
            columns = _header(path)
            text = "\t".join(row.cells(columns or COLUMNS)) + "\n"
            if columns is None:
                text = "\t".join(COLUMNS) + "\n" + text
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, text.encode("utf-8"))
                os.fsync(fd)
            finally:
                os.close(fd)
    except Timeout:
        raise Refused(f"the ledger {path} stayed locked for {LOCK_TIMEOUT_S:.0f} s; "
                      "another dit-ar process is writing it — try again") from None


def _repair_tail(path: Path) -> None:
    """Move an unterminated last line (a write cut short) to a side file so no row is half-kept."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    side = path.with_name(f"{path.name}.torn-{int(time.time())}")
    side.write_bytes(data[cut:])
    with open(path, "r+b") as fh:
        fh.truncate(cut)
        fh.flush()
        os.fsync(fh.fileno())


def read(path: Path) -> list[LedgerRow]:
    """All complete rows (a torn last line is ignored)."""
    columns = _header(path)
    if columns is None:
        return []
    lines = path.read_text(encoding="utf-8").split("\n")
    rows = []
    for line in lines[1:-1]:  # the last element is '' or a torn tail
        cells = line.split("\t")
        if len(cells) == len(columns):
            rows.append(LedgerRow.from_cells(list(columns), cells))
    return rows
