"""results.tsv: the append-only ledger of every baseline and experiment (DESIGN §4)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from .errors import Refused

COLUMNS = (
    "timestamp", "run_id", "lane", "commit", "parent", "status", "declared_class", "effective_class",
    "metric", "best_before", "candidate", "improvement_pct", "p_value", "peak_vram_mb",
    "quality_summary", "description", "run_dir",
)
STATUSES = ("baseline", "keep", "discard-quality", "discard-performance", "discard-scope", "crash")
LOCK_TIMEOUT_S = 30.0


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return " ".join(str(value).replace("\t", " ").split())


def format_row(row: dict[str, Any]) -> str:
    """One TSV line with every column present, tabs and newlines in values flattened."""
    missing = set(COLUMNS) - set(row)
    if missing:
        raise ValueError(f"ledger row lacks columns {sorted(missing)}")
    if row["status"] not in STATUSES:
        raise ValueError(f"ledger status {row['status']!r} is not one of {STATUSES}")
    return "\t".join(_cell(row[c]) for c in COLUMNS) + "\n"


def append(path: Path, row: dict[str, Any]) -> None:
    """Append one row under a file lock in a single write; a torn tail from a kill is set aside first."""
    line = format_row(row).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S):
            _repair_tail(path)
            new = not path.exists() or path.stat().st_size == 0
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, ("\t".join(COLUMNS) + "\n").encode() + line if new else line)
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


def read(path: Path) -> list[dict[str, str]]:
    """All complete rows as dicts (a torn last line is ignored)."""
    if not path.is_file():
        return []
    rows = []
    lines = path.read_text(encoding="utf-8").split("\n")
    if not lines or lines[0].split("\t") != list(COLUMNS):
        raise Refused(f"{path}: the header row is not the ledger header {COLUMNS}")
    for line in lines[1:-1]:  # the last element is '' or a torn tail
        cells = line.split("\t")
        if len(cells) == len(COLUMNS):
            rows.append(dict(zip(COLUMNS, cells)))
    return rows
