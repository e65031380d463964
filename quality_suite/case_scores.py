"""One side's per-case task scores: what the paired non-inferiority tests compare, case by case.

For each task metric, one row per case id: a scalar per-case score, or a set metric's feature row. Rows of two
sides are paired by case id (`paired`); blocks of new cases are appended (`plus`). The baseline's rows of its
extension cases are stored at baseline time (`save`/`load`, one safetensors file, case ids in its metadata).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .task_metrics import TaskScore

CASE_SCORES = "task_cases.safetensors"  # the baseline's per-case task scores of all its cases (baseline folder)


@dataclass(frozen=True)
class CaseScores:
    """Per metric, per case id: the row the paired test compares (in the order the cases were added)."""

    rows: Mapping[str, Mapping[str, np.ndarray]] = field(default_factory=dict)

    @classmethod
    def of(cls, scores: Mapping[str, TaskScore]) -> CaseScores:
        return cls({name: score.rows() for name, score in scores.items()})

    def ids(self, metric: str) -> tuple[str, ...]:
        return tuple(self.rows.get(metric, {}))

    def all_ids(self) -> set[str]:
        """Every case id some metric scored."""
        return {cid for rows in self.rows.values() for cid in rows}

    def plus(self, other: CaseScores) -> CaseScores:
        """These rows and then `other`'s (a case id already here keeps its row)."""
        merged = {}
        for metric in dict.fromkeys([*self.rows, *other.rows]):
            rows = dict(self.rows.get(metric, {}))
            for cid, row in other.rows.get(metric, {}).items():
                rows.setdefault(cid, row)
            merged[metric] = rows
        return CaseScores(merged)

    def select(self, ids: Sequence[str]) -> CaseScores:
        """The rows of these case ids only (those a metric has), in the order given."""
        return CaseScores({m: {cid: rows[cid] for cid in ids if cid in rows} for m, rows in self.rows.items()})

    def paired(self, other: CaseScores, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(these rows, the other side's rows) of the cases both sides scored, in this side's order."""
        mine, theirs = self.rows.get(metric, {}), other.rows.get(metric, {})
        common = [cid for cid in mine if cid in theirs]
        if not common:
            return np.zeros(0), np.zeros(0)
        return np.stack([mine[c] for c in common]), np.stack([theirs[c] for c in common])

    def save(self, path: Path) -> None:
        from safetensors.numpy import save_file

        tensors = {m: np.stack(list(rows.values())).astype(np.float64) for m, rows in self.rows.items() if rows}
        ids = {m: list(rows) for m, rows in self.rows.items() if rows}
        save_file(tensors, str(path), metadata={"case_ids": json.dumps(ids)})

    @classmethod
    def load(cls, path: Path) -> CaseScores:
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy") as fh:
            ids = json.loads((fh.metadata() or {}).get("case_ids", "{}"))
            return cls({m: dict(zip(ids[m], fh.get_tensor(m))) for m in ids})
