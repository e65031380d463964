"""`dit-ar doctor`'s lines on the case budgets: whether each lane with a per-case task metric can pass an approximate
and a quantization change (n_min, n_pass within its case budget), and when not the budget needed and the key that
raises it (quality_suite/refusal.py `shortfall_lines`)."""

from __future__ import annotations

from collections.abc import Mapping

from dit_ar_contract.config import Config, Lane

from ..state.paths import StatePaths
from ..state.runs import BASELINE_RECORD, read_baseline
from ..state.session import read_record


def _cases(config: Config, lane: Lane) -> int:
    """The lane's corpus size (0 when it cannot be read: doctor reports that with the lane)."""
    from quality_suite.corpora import load_corpus

    try:
        return len(load_corpus(config.root / lane.corpus))
    except Exception:  # noqa: BLE001 - the corpus problem is reported once, with the lane
        return 0


def case_budget_lines(config: Config, task_base: Mapping[str, Mapping[str, float]] | None = None) -> list[str]:
    """Per lane with a per-case task metric: its budget, the cases each (metric, class) needs, and each shortfall.
    `task_base` (lane name -> the baseline's task scores) sets R of a CLIP score; without it the score's range."""
    from quality_suite import refusal, task_tests

    lines = []
    for lane in config.lanes.values():
        corpus, base = _cases(config, lane), (task_base or {}).get(lane.name)
        needs = task_tests.cases_needed(lane.quality, corpus, lane.task_metrics, base) if corpus else []
        if not needs:
            continue
        short = refusal.shortfall_lines(lane.name, lane.quality, corpus, lane.task_metrics, base)
        multiple = lane.quality.noninferiority.case_budget_multiple
        wants = ", ".join(f"{n.cls} {n.metric} {n.needed}" for n in needs)
        lines.append(f"lane {lane.name}: case budget {needs[0].budget} ({multiple:g} x the {corpus}-case corpus); "
                     f"cases a test needs before it may pass: {wants}" + ("" if short else ": every class can pass"))
        lines += [f"  - {line}" for line in short]
        if base is None and "clip_score" in lane.task_metrics:
            lines.append("  - clip_score's n_min takes R, the largest loss of one case, as the score's range (100) "
                         "until a baseline measures the lane's CLIP score (then about 30: fewer cases); `dit-ar "
                         "doctor` checks again after `dit-ar baseline`")
    return lines


def session_task_base(config: Config) -> dict[str, dict[str, float]]:
    """The session's lane -> its baseline's corpus task scores (R of a CLIP score), when it has a baseline."""
    paths = StatePaths(config.root)
    record = read_record(paths)
    if record is None:
        return {}
    found = read_baseline(paths.baseline(record.lane_id) / BASELINE_RECORD)
    return {record.lane: dict(found.task_metrics)} if found else {}
