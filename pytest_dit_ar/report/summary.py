"""`dit-ar summary --markdown`: the session as a PR-ready text, from the state files alone (read-only).

The chain from the original baseline to the best (each kept commit with its class, estimate, interval and
quality figures), the best's confirmation on fresh seeds (state/confirmation.py: confirmed or not, with each test's
estimate and bound, or why it was not run), the discarded ideas grouped by reason, the latest re-validation (the
cumulative speed-up measured against the original baseline, beside the product of the steps) and its holdout
result, and the device and software stack of the baseline. The session report (index.html) writes it beside itself
as summary.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dit_ar_contract.status import Status

from ..state import confirmation, ledger, runs
from ..state.baseline import BaselineSummary
from ..state.best import BestRecord
from ..state.ledger import LedgerRow
from ..state.paths import StatePaths
from ..state.phases import PhaseTimes

REVALIDATION = runs.REVALIDATION_RECORD


def _cell(text: Any) -> str:
    return " ".join(str(text).replace("|", "\\|").split()) if text not in (None, "") else "-"


def _pct(value: Any) -> str:
    return f"{value:+.2f}%" if isinstance(value, (int, float)) else "-"


def session_rows(rows: list[LedgerRow], lane_id: str) -> list[LedgerRow]:
    """The lane's rows from its last baseline on (the current session)."""
    mine = [r for r in rows if r.lane == lane_id]
    starts = [i for i, r in enumerate(mine) if r.status is Status.BASELINE]
    return mine[starts[-1]:] if starts else mine


def latest_revalidation(root: Path, rows: list[LedgerRow]) -> runs.RevalidationRecord | None:
    """The last re-validation record of these rows (None when none)."""
    for row in reversed(rows):
        if row.status is Status.REVALIDATE:
            return runs.read_revalidation(root / row.run_dir)
    return None


def revalidation_warning(root: Path, rows: list[LedgerRow]) -> str | None:
    """The latest re-validation's disagreement warning, if it has one."""
    record = latest_revalidation(root, rows)
    return (record.warning or None) if record else None


def _interval(look: Any) -> str:
    """A look's (or a re-validation estimate's) estimate and interval."""
    if look is None:
        return "-"
    return f"{_pct(look.estimate_pct)} [{_pct(look.lower_pct)}, {_pct(look.upper_pct)}]"


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
            perf = runs.read_perf(root / row.run_dir)
            look = perf.look if perf else None
            cls = row.effective_class or row.declared_class
            if row.declared_class and row.effective_class and row.declared_class != row.effective_class:
                cls = f"{row.effective_class} (declared {row.declared_class})"
            estimate = _interval(look) if look is not None else _pct(row.improvement_pct)
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


def _revalidation(data: runs.RevalidationRecord | None) -> list[str]:
    if data is None:
        return ["not re-validated yet: run `dit-ar revalidate` (it also runs after every `revalidate_every` keeps)"]
    lines = [f"- best `{str(data.best_commit)[:10]}` against the original baseline "
             f"`{str(data.baseline_commit)[:10]}`, {data.segments} segments, {data.rounds} "
             f"rounds in fresh worker pairs ({data.created})",
             f"- measured cumulative speed-up: {_interval(data.measured)} (95%)",
             f"- product of the {data.steps} kept steps' estimates: {_interval(data.product)} (95%)",
             f"- {(data.holdout.headline if data.holdout else '') or _holdout_line(data.holdout)}"]
    if data.warning:
        lines.append(f"\n> **{data.warning}**")
    return lines


def _holdout_line(held: runs.HoldoutRecord | None) -> str:
    if held is None or held.note:
        return f"holdout: not judged ({held.note if held else 'no record'})"
    verdict = "passes" if held.ok else "FAILS"
    return f"holdout: {verdict} {held.passed}/{held.cases} cases under the {held.effective_class} gate"


def confirmation_view(root: Path, rows: list[LedgerRow], lane_id: str, best: BestRecord | None,
                      skipped: bool = False, why_not: str = "") -> confirmation.ConfirmationView:
    """The best's confirmation on fresh seeds: the lane's record or a re-validation's copy of it, for this best."""
    base = next((r for r in rows if r.status is Status.BASELINE), None)
    found = None
    if best is not None:
        dirs = tuple(root / r.run_dir for r in reversed(rows) if r.status is Status.REVALIDATE and r.run_dir)
        found = confirmation.of_best(StatePaths(root), lane_id, best.commit, dirs)
    return confirmation.view(best, base.commit if base else None, found, skipped, why_not)


def _confirmation(view: confirmation.ConfirmationView) -> list[str]:
    return [f"**{view.headline}**"] + ([""] + [f"- {line}" for line in view.lines] if view.lines else [])


def _stack(baseline: BaselineSummary) -> list[str]:
    device = baseline.device
    name = device.name or (device.kind if device.kind != "none" else "") or "unknown"
    lines = [f"- device: {name}"]
    lines += [f"- {k}: {v}" for k, v in sorted(baseline.environment.items())
              if k != "device" and isinstance(v, (str, int, float))]
    workload = baseline.workload
    if workload:
        lines.append("- workload: " + ", ".join(f"{k} {workload[k]}" for k in ("preset", "resolution", "steps",
                                                                              "guidance", "batch") if k in workload))
    return lines


def _phases(root: Path, experiments: list[LedgerRow]) -> list[str]:
    """One row per experiment: its wall time by phase (state/phases.py), warm-up rounds and what it reused."""
    head = ["run", "verdict", *(p.replace("_", " ") for p in PhaseTimes.PHASES), "total s", "warm-ups", "reused"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in experiments:
        phases = runs.read_experiment(root / row.run_dir).phases if row.run_dir else None
        if phases is None:
            lines.append(f"| {row.run_id} | {row.status.word} |" + " - |" * (len(head) - 2))
            continue
        reused = ", ".join(([f"{phases.warmup_reused} generates as warm-up"] if phases.warmup_reused else [])
                           + (["judging"] if phases.judging_reused else [])) or "-"
        lines.append(f"| {row.run_id} | {row.status.word} | "
                     + " | ".join(f"{s:.1f}" for s in phases.seconds().values())
                     + f" | {phases.total:.1f} | {phases.warmup_rounds} | {reused} |")
    return lines


def markdown(root: Path, lane_id: str | None = None, time: bool = False, skipped: bool = False,
             why_not: str = "") -> str:
    """The PR-ready text of the session at `root` (its lane, or `lane_id`); with `time`, where each experiment's
    wall time went, by phase. `skipped`: the confirmation was left out (`--no-confirm`); `why_not`: why it did not
    run (a refusal)."""
    paths = StatePaths(root)
    session = runs.read_session(paths)
    lane_id = lane_id or (session.lane_id if session else "") or ""
    rows = session_rows(ledger.read(paths.ledger), lane_id)
    best = runs.read_bests(paths).get(lane_id)
    baseline = runs.read_baseline(paths.baseline(lane_id) / runs.BASELINE_RECORD)
    experiments = [r for r in rows if r.status.is_experiment]
    keeps = [r for r in experiments if r.status is Status.KEEP]
    lines = [f"## dit-ar session {session.tag if session else '?'}: lane {lane_id}", "",
             f"{len(experiments)} experiments, {len(keeps)} kept; best `{(best.commit if best else '-')[:10]}` "
             f"(effective class {best.effective_class if best else '-'}).", "",
             "### Chain from the original baseline to the best", ""]
    lines += _chain(root, rows, best.history if best else ())
    lines += ["", "Estimates are each keep's verdict against the best of its moment (improvement of the primary "
              "metric, positive = faster), with the interval of its last look.", "",
              "### The best on fresh seeds", ""]
    lines += _confirmation(confirmation_view(root, rows, lane_id, best, skipped, why_not))
    lines += ["", "### Re-validation", ""]
    lines += _revalidation(latest_revalidation(root, rows))
    lines += ["", "### The best's arithmetic", ""]
    found = runs.arithmetic_of(paths.runs, lane_id, best.commit) if best else None
    lines += [found.line() if found else "not profiled: `dit-ar profile` of the best gives its achieved TFLOP/s "
              "and the share of the card's measured peak"]
    lines += ["", "### Discarded ideas", ""]
    lines += _discarded(rows)
    if time:
        lines += ["", "### Where the time went (seconds by phase)", ""]
        lines += _phases(root, experiments)
    lines += ["", "### Device and software stack (baseline)", ""]
    lines += _stack(baseline) if baseline else ["no baseline yet"]
    return "\n".join(lines).rstrip() + "\n"
