"""The plugin's terminal summary: the failing cases with their pictures, a plain run's speed against the best, and
an experiment's verdict in words. Text from typed results (`Evidence`, `PerfOutcome`, `Lane`), written to pytest's
terminal reporter (like pytest-benchmark's `TableResults` and syrupy's `SnapshotReport.lines`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dit_ar_contract.config import Lane

    from ..loop.evidence import Evidence
    from ..loop.experiment import Experiment
    from ..loop.measurement import PerfOutcome


def write(tr: Any, evidence: Evidence | None, experiment: Experiment | None, speed: bool) -> None:
    """Every section this run has something for (`tr` is pytest's terminal reporter)."""
    if evidence is not None:
        failures_section(tr, evidence)
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
        tr.write_line(f"quality: {quality.headline()}")
    perf = exp.evidence.performance_result if exp.evidence else None
    if perf is not None and perf.look is not None:
        tr.write_line(f"speed: {latencies(perf, exp.session.lane)}")
    for reason in verdict.reasons[:10]:
        tr.write_line(f"- {reason}")
    spent = exp.seconds()
    tr.write_line("time: " + ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in spent.items()))
    action = "kept as the new best" if verdict.exit_code == 0 else f"reset to {exp.parent[:10]}"
    tr.write_line(f"{action}; evidence in {exp.run_dir}")


def failures_section(tr: Any, evidence: Evidence) -> None:
    """The failing cases with metric, value, threshold and the path of their baseline | candidate | diff picture."""
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


def speed_section(tr: Any, evidence: Evidence) -> None:
    """Plain `pytest -m perf`: the candidate against the best, in words."""
    perf = evidence.performance_result
    if perf is None or perf.look is None:
        return
    look = perf.look
    tr.section("dit-ar speed against the best")
    tr.write_line(f"{latencies(perf, evidence.session.lane)}: "
                  f"{look.estimate_pct:+.2f}% [{look.lower_pct:+.2f}%, {look.upper_pct:+.2f}%] over {look.rounds} "
                  f"rounds in {look.segments} fresh worker pairs; {perf.reasons[0] if perf.reasons else ''}")


def latencies(perf: PerfOutcome, lane: Lane) -> str:
    """Both sides' median batch latency, and on GPU lanes what an image costs in GPU-seconds."""
    cand, best = perf.median_ms("cand"), perf.median_ms("best")
    if cand is None or best is None:
        return "no timed rounds"
    text = f"candidate {cand:.1f} ms vs best {best:.1f} ms per batch"
    gpu_s = lane.gpu_seconds_per_image(cand), lane.gpu_seconds_per_image(best)
    if None not in gpu_s:
        text += f" ({gpu_s[0]:.3g} vs {gpu_s[1]:.3g} GPU-s per image on {lane.gpus} GPU{'s' if lane.gpus > 1 else ''})"
    return text
