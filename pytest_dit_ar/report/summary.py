"""`dit-ar summary --markdown`: the session as a PR-ready text, from the state files alone (read-only).

The chain from the original baseline to the best (each kept commit with its class, estimate, interval and
quality figures), the discarded ideas grouped by reason, the latest re-validation (the cumulative speed-up
measured against the original baseline, beside the product of the steps) and its holdout result, and the device
and software stack of the baseline. The session report (index.html) writes it beside itself as summary.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dit_ar_contract.status import Status

from ..state import ledger
from ..state.ledger import LedgerRow
from ..state.paths import StatePaths

REVALIDATION = "revalidate.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _cell(text: Any) -> str:
    return " ".join(str(text).replace("|", "\\|").split()) if text not in (None, "") else "-"


def _pct(value: Any) -> str:
    return f"{value:+.2f}%" if isinstance(value, (int, float)) else "-"


def session_rows(rows: list[LedgerRow], lane_id: str) -> list[LedgerRow]:
    """The lane's rows from its last baseline on (the current session)."""
    mine = [r for r in rows if r.lane == lane_id]
    starts = [i for i, r in enumerate(mine) if r.status is Status.BASELINE]
    return mine[starts[-1]:] if starts else mine


def latest_revalidation(root: Path, rows: list[LedgerRow]) -> dict[str, Any]:
    """The last re-validation record of these rows ({} when none)."""
    for row in reversed(rows):
        if row.status is Status.REVALIDATE:
            return _read(root / row.run_dir / REVALIDATION)
    return {}


def revalidation_warning(root: Path, rows: list[LedgerRow]) -> str | None:
    """The latest re-validation's disagreement warning, if it has one."""
    return latest_revalidation(root, rows).get("warning") or None


def _interval(look: dict[str, Any]) -> str:
    if not look:
        return "-"
    return f"{_pct(look.get('estimate_pct'))} [{_pct(look.get('lower_pct'))}, {_pct(look.get('upper_pct'))}]"


def _chain(root: Path, rows: list[LedgerRow], history: Iterable[str]) -> list[str]:
    kept = set(history)
    lines = ["| # | commit | class | estimate [interval] | quality | change |", "|---|---|---|---|---|---|"]
    base = next((r for r in rows if r.status is Status.BASELINE), None)
    if base is not None:
        lines.append(f"| 0 | `{base.commit[:10]}` | baseline | - | {_cell(base.quality_summary)} | original baseline |")
    n = 0
    for row in rows:
        if row.status is Status.KEEP and (not kept or row.commit in kept):
            n += 1
            look = _read(root / row.run_dir / "perf.json").get("look") or {}
            cls = row.effective_class or row.declared_class
            if row.declared_class and row.effective_class and row.declared_class != row.effective_class:
                cls = f"{row.effective_class} (declared {row.declared_class})"
            estimate = _interval(look) if look else _pct(row.improvement_pct)
            lines.append(f"| {n} | `{row.commit[:10]}` | {cls} | {estimate} | {_cell(row.quality_summary)} "
                         f"| {_cell(row.description)} |")
    if n == 0:
        lines.append("| - | - | - | - | - | nothing kept yet |")
    return lines


def _discarded(rows: list[LedgerRow]) -> list[str]:
    groups: dict[Status, list[LedgerRow]] = {}
    for row in rows:
        if row.status.is_failure:
            groups.setdefault(row.status, []).append(row)
    if not groups:
        return ["none"]
    lines = []
    for status, items in groups.items():
        lines.append(f"**{status.verdict_word}** ({len(items)})")
        lines += [f"- `{r.commit[:10]}` {_cell(r.description)}: {_cell(r.reason or r.quality_summary)[:200]}"
                  for r in items]
        lines.append("")
    return lines


def _revalidation(data: dict[str, Any]) -> list[str]:
    if not data:
        return ["not re-validated yet: run `dit-ar revalidate` (it also runs after every `revalidate_every` keeps)"]
    measured, product = data.get("measured") or {}, data.get("product") or {}
    lines = [f"- best `{str(data.get('best_commit'))[:10]}` against the original baseline "
             f"`{str(data.get('baseline_commit'))[:10]}`, {data.get('segments')} segments, {data.get('rounds')} "
             f"rounds in fresh worker pairs ({data.get('created', '')})",
             f"- measured cumulative speed-up: {_interval(measured)} (95%)",
             f"- product of the {len(data.get('steps') or [])} kept steps' estimates: {_interval(product)} (95%)",
             f"- {(data.get('holdout') or {}).get('headline') or _holdout_line(data.get('holdout') or {})}"]
    if data.get("warning"):
        lines.append(f"\n> **{data['warning']}**")
    return lines


def _holdout_line(held: dict[str, Any]) -> str:
    if not held or held.get("note"):
        return f"holdout: not judged ({held.get('note', 'no record')})"
    verdict = "passes" if held.get("ok") else "FAILS"
    return (f"holdout: {verdict} {held.get('passed')}/{held.get('cases')} cases under the "
            f"{held.get('effective_class')} gate")


def _stack(baseline: dict[str, Any]) -> list[str]:
    env = baseline.get("environment") or {}
    device = env.get("device") or {}
    name = device.get("name") or device.get("kind") or "unknown"
    lines = [f"- device: {name}"]
    lines += [f"- {k}: {v}" for k, v in sorted(env.items()) if k != "device" and isinstance(v, (str, int, float))]
    workload = baseline.get("workload") or {}
    if workload:
        lines.append("- workload: " + ", ".join(f"{k} {workload[k]}" for k in ("preset", "resolution", "steps",
                                                                              "guidance", "batch") if k in workload))
    return lines


def markdown(root: Path, lane_id: str | None = None) -> str:
    """The PR-ready text of the session at `root` (its lane, or `lane_id`)."""
    paths = StatePaths(root)
    session = _read(paths.session)
    lane_id = lane_id or session.get("lane_id") or ""
    rows = session_rows(ledger.read(paths.ledger), lane_id)
    best = _read(paths.best).get(lane_id) or {}
    baseline = _read(paths.baseline(lane_id) / "baseline.json")
    experiments = [r for r in rows if r.status.is_experiment]
    keeps = [r for r in experiments if r.status is Status.KEEP]
    lines = [f"## dit-ar session {session.get('tag', '?')}: lane {lane_id}", "",
             f"{len(experiments)} experiments, {len(keeps)} kept; best `{str(best.get('commit', '-'))[:10]}` "
             f"(effective class {best.get('effective_class', '-')}).", "",
             "### Chain from the original baseline to the best", ""]
    lines += _chain(root, rows, best.get("history") or ())
    lines += ["", "Estimates are each keep's verdict against the best of its moment (improvement of the primary "
              "metric, positive = faster), with the interval of its last look.", "",
              "### Re-validation", ""]
    lines += _revalidation(latest_revalidation(root, rows))
    lines += ["", "### Discarded ideas", ""]
    lines += _discarded(rows)
    lines += ["", "### Device and software stack (baseline)", ""]
    lines += _stack(baseline) if baseline else ["no baseline yet"]
    return "\n".join(lines).rstrip() + "\n"
