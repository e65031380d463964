"""The plugin's terminal summary: the failing cases with their pictures, a plain run's speed against the best, and
an experiment's verdict in words. Text from typed results (`Evidence`, `PerfRecord`, `Lane`), written to pytest's
terminal reporter (like pytest-benchmark's `TableResults` and syrupy's `SnapshotReport.lines`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dit_ar_contract.sides import Role

if TYPE_CHECKING:
    from dit_ar_contract.config import Lane

    from ..loop.evidence import Evidence
    from ..loop.experiment import Experiment
    from ..state.perf_record import PerfRecord


def write(tr: Any, evidence: Evidence | None, experiment: Experiment | None, speed: bool,
          failed_ids: list[str] | None = None) -> None:
    """Every section this run has something for (`tr` is pytest's terminal reporter; `failed_ids` the failing
    suite tests as node ids to paste back)."""
    if evidence is not None:
        # a re-run judges the working tree: the same one in a plain run, the parent after an experiment's reset
        failures_section(tr, evidence, [] if experiment is not None else failed_ids)
        if speed:
            speed_section(tr, evidence)
    if experiment is not None and experiment.verdict is not None:
        verdict_section(tr, experiment)


def verdict_section(tr: Any, exp: Experiment) -> None:
    """The experiment: run, class, quality, speed, the verdict's reasons, where the time went, keep or reset."""
    verdict = exp.verdict
    assert verdict is not None
    tr.section("dit-ar experiment")
    tr.write_line(f"run {exp.run_id}  lane {exp.session.lane_id}  commit {exp.commit[:10]} (parent {exp.parent[:10]})")
    quality = exp.evidence.quality_result if exp.evidence else None
    if quality is not None:
        tr.write_line(f"class: declared {quality.declared_class}, effective {quality.effective_class}"
                      + (f" ({'; '.join(quality.audit_reasons)})" if quality.audit_reasons else ""))
        tr.write_line(f"quality: {quality.headline(tests=False)}")
        for test in quality.task_tests:
            tr.write_line(f"quality test: {quality.test_text(test)}")
    perf = exp.evidence.performance_result if exp.evidence else None
    if perf is not None and perf.look is not None:
        for line in speed_lines(perf, exp.session.lane):
            tr.write_line(line)
        tr.write_line(f"start-up: {perf.startup_line()}")
        if perf.memory_line():
            tr.write_line(f"memory: {perf.memory_line()}")
        if perf.rounds_flagged:
            tr.write_line(f"rounds: {perf.rounds_flagged}")
        forked = perf.forked_workers()
        if forked:
            ready, starts = forked
            tr.write_line(f"workers: {len(ready)} forked, ready in {max(ready, default=0):.2f} s at most; "
                          f"fork servers started in {max(starts, default=0):.1f} s")
    timed = exp.evidence.timed_quality if exp.evidence else None
    for line in timed.lines() if timed is not None else ():
        tr.write_line(f"timed quality: {line}")
    for reason in verdict.reasons[:10]:
        tr.write_line(f"- {reason}")
    if exp.role_check is not None:
        tr.write_line(exp.role_check.line())
    from ..loop.experiment import logs_line

    logs = logs_line(exp.evidence)
    if logs:
        tr.write_line(logs)
    if exp.pregate:
        from ..loop.guards.pregate import summary as pregate_summary

        tr.write_line(f"static pre-gate (flags, does not refuse): {pregate_summary(exp.pregate)}")
        for finding in exp.pregate[:8]:
            tr.write_line(f"  {finding.describe()}")
    from ..loop.experiment import phase_times

    tr.write_line("time: " + phase_times(exp.evidence, exp.seconds()).line())
    if exp.evidence is not None and exp.evidence.reuse.note:
        tr.write_line(f"reuse: {exp.evidence.reuse.note}")
    if exp.evidence is not None:
        from ..loop.candidate import warm_note  # loaded by the experiment already

        if warm_note(exp.evidence.workers):
            tr.write_line(f"warm servers: {warm_note(exp.evidence.workers)}")
    tr.write_line(action_line(exp))


def action_line(exp: Experiment) -> str:
    """What the verdict did to the branch, the way back of a reset commit, and where the evidence is."""
    from ..loop.experiment import way_back

    verdict = exp.verdict
    assert verdict is not None and exp.session is not None and exp.run_dir is not None
    action = "kept as the new best" if verdict.exit_code == 0 else \
        f"reset to {exp.parent[:10]}; {way_back(exp.commit, exp.session.config.mutable_paths)}"
    if exp.judge_only:  # a fleet's judge in its slot
        action = f"judged in its slot; the session's own process records it ({action})"
        return f"{action}; evidence in {exp.run_dir.relative_to(exp.session.root)}"
    return f"{action}; evidence in {exp.run_dir}"


def prerun_lines(exp: Experiment) -> list[str]:
    """A verdict reached before any candidate code ran (a commit out of scope), in a few lines: each reason
    once, then what was done to the branch (`dit-ar experiment` prints these instead of pytest's framing)."""
    verdict = exp.verdict
    assert verdict is not None
    return [f"{verdict.status.verdict_word}: {reason}" for reason in verdict.reasons[:10]] + [action_line(exp)]


def failures_section(tr: Any, evidence: Evidence, failed_ids: list[str] | None = None) -> None:
    """The failing cases with metric, value, threshold and the path of their baseline | candidate | diff picture,
    and the failing tests as node ids to paste back (`pytest '<id>'`)."""
    quality = evidence.quality_result
    if quality is None or quality.passed:
        return
    tr.section("dit-ar quality failures")
    pictures = evidence.run.diffs
    for case_id, result in quality.per_case.items():
        for check in (c for c in result.checks if not c.passed):
            tr.write_line(f"{case_id}: {check.name} {check.value:.4g} (needs {check.op} {check.threshold:.4g})  "
                          f"{pictures / (case_id + '.png')}")
    for check in (c for c in quality.aggregate if not c.passed):
        tr.write_line(f"corpus: {check.describe()}")
    for nodeid in (failed_ids or [])[:10]:
        tr.write_line(f"re-run: pytest '{nodeid}'")


def speed_section(tr: Any, evidence: Evidence) -> None:
    """Plain `pytest -m perf`: the candidate against the best, in words."""
    perf = evidence.performance_result
    if perf is None or perf.look is None:
        return
    tr.section("dit-ar speed against the best")
    for line in speed_lines(perf, evidence.session.lane):
        tr.write_line(line)
    tr.write_line(f"start-up: {perf.startup_line()}")
    if perf.reasons:
        tr.write_line(f"verdict of the speed test: {perf.reasons[0]}")


def speed_lines(perf: PerfRecord, lane: Lane) -> list[str]:
    """One speed figure per line, each named by its statistic: the paired estimate the verdict uses, then each
    side's median batch latency (unpaired: the machine's drift between rounds is in it), and a note when the
    two disagree in direction."""
    look = perf.look
    assert look is not None
    lines = [f"speed: {look.figure_text(2)} paired estimate "
             f"(the verdict's figure: trimmed mean of each round's candidate/best time ratio, {look.rounds} rounds in "
             f"{look.segments} fresh worker pair{'s' if look.segments != 1 else ''}; + is faster)"]
    cand, best = perf.median_ms(Role.CANDIDATE), perf.median_ms(Role.BEST)
    for role, ms in ((Role.CANDIDATE, cand), (Role.BEST, best)):
        if ms is None:
            continue
        gpu_s = lane.gpu_seconds_per_image(ms)
        cost = f"; {gpu_s:.3g} GPU-s per image on {lane.gpus} GPU{'s' if lane.gpus > 1 else ''}" if gpu_s else ""
        lines.append(f"{role.label} latency: {ms:.1f} ms per batch (median of its own timed rounds{cost})")
    if cand is not None and best is not None and (cand < best) != (look.estimate_pct > 0) and cand != best:
        lines.append("note: the medians and the paired estimate disagree in direction: the machine's speed drifted "
                     "between rounds; the paired estimate compares each round's candidate with the best timed "
                     "next to it, the medians do not")
    return lines
