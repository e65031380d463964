"""`dit-ar baseline`: outputs, noise envelope, task scores and timing of the unmodified pipeline."""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable

import git

from dit_ar_contract import versions
from dit_ar_contract.digest import sha256_file
from dit_ar_contract.errors import Refused
from dit_ar_contract.sides import Role, Sides
from dit_ar_contract.status import Status
from perf_suite import profiling
from perf_suite.busy import MachineLoad, busy_warning
from quality_suite import metrics, task_metrics
from quality_suite.artifacts import envelope_of, per_case_fidelity, save_case
from quality_suite.case_scores import CaseScores
from quality_suite.corpora import Case, load_corpus

from ..state import gitops, integrity, records
from ..state.baseline import BaselineSummary, BaselineTiming, Roofline, cases_dir
from ..state.files import write_record
from ..state.ledger import LedgerRow
from ..state.paths import new_run_id, now
from ..state.perf_record import PerfRecord
from ..state.runs import RunPaths
from ..state.session import INTEGRITY_WAY_OUT, Session, open_session, verify_integrity
from ..worker.client import WorkerLauncher, WorkerProcess
from . import conclusion
from .guards import gpu_locks
from .quality import cases as quality_cases
from .quality import holdout
from .quality.generation import CorpusOutputs, audit_evidence, generate_corpus
from .speed import warm_servers
from .speed.measurement import measure
from .speed.measurement_plan import MeasurementPlan, Side
from .speed.progress import TimingProgress
from .workers import memory_plan
from .workers.launch import launcher_for, memory_budget
from .workers.live import Live

PERTURBATIONS: dict[str, dict[str, Any]] = {"split-batch": {"batch": 1}, "merged-batches": {"batches": 2},
                                            "reversed-batches": {"reverse": True},
                                            "one-thread": {"perturb": {"threads": 1}},
                                            "sdpa-math": {"perturb": {"sdpa": "math"}}}


def perturbations(session: Session) -> dict[str, dict[str, Any]]:
    """Benign, mathematically-equivalent ways to run the same baseline (for the exact envelope): those of the lane's
    device that its `quality.exact.envelope_reruns` keeps (all of them by default)."""
    lane = session.lane
    return {name: PERTURBATIONS[name] for name in lane.quality.exact.reruns(lane.is_cuda)}


def rerun_batch(how: dict[str, Any], lane_batch: int) -> int:
    """The batch a benign rerun generates in: its own (`split-batch`: 1), `batches` of the lane's as one
    (`merged-batches`: two), or the lane's."""
    return int(how.get("batch", lane_batch * how.get("batches", 1)))


def _check_preconditions(session: Session) -> git.Repo:
    record = session.require_current_layout()
    repo = gitops.open_repo(session.root)
    gitops.require_branch(repo, record.tag)
    gitops.require_clean(repo)
    if gitops.head_sha(repo) != record.baseline_commit:
        raise Refused(f"HEAD is not the session's baseline commit {record.baseline_commit[:10]}: "
                      "the baseline is taken from the unmodified pipeline")
    if (session.baseline_dir / integrity.MANIFEST).exists():
        raise Refused(f"lane {session.lane_id} already has a baseline ({session.baseline_dir}); the original baseline "
                      "is never replaced — start a new session with `dit-ar init --tag NEW` for a fresh one")
    problems = verify_integrity(session)
    if problems:
        raise Refused("fixed files differ from integrity.json: " + "; ".join(problems[:5]), way_out=INTEGRITY_WAY_OUT)
    return repo


def _envelope_runs(session: Session, worker: WorkerProcess, cases: list[Case], default: CorpusOutputs,
                   live: Live | None) -> tuple[dict[str, Any], dict[str, float], list[CaseScores]]:
    """Per-case fidelity of each benign rerun to the default run, the largest change each task score
    showed across the reruns (the task metrics' own noise, which exact and numerical changes may use), and
    each rerun's per-case task scores (for the metrics' resolution, loop/quality/cases.py)."""
    runs, task_spread, rerun_scores = {}, {}, []
    names, quality = session.lane.task_metrics, session.lane.quality
    reference = {k: v.value for k, v in task_metrics.compute(names, default.images, cases, session.root,
                                                               quality).items()}
    key, lane = session.started.seed_key, session.lane
    for name, how in perturbations(session).items():
        order = list(reversed(cases)) if how.get("reverse") else cases
        alt = generate_corpus(worker, order, rerun_batch(how, lane.batch), key, lane.resolution,
                              perturb=how.get("perturb"), live=live, desc=f"noise envelope: rerun {name}")
        runs[name] = per_case_fidelity(alt.images, alt.latents, default.images, default.latents)
        alt_scores = task_metrics.compute(names, alt.images, cases, session.root, quality)
        for metric, score in alt_scores.items():
            task_spread[metric] = max(task_spread.get(metric, 0.0), abs(score.value - reference[metric]))
        rerun_scores.append(CaseScores.of(alt_scores))
    return runs, task_spread, rerun_scores


def _aa_timing(session: Session, launcher: WorkerLauncher, run_dir: Path, prompts: tuple[str, ...],
               live: Live | None = None, peak_mb: float | None = None) -> PerfRecord:
    """One A/A segment: the baseline against itself, in two fresh workers (the noise floor); one at a time
    when two of them do not fit the lane's memory budget (loop/workers/memory_plan)."""
    lane = session.lane
    side = Side("baseline", session.root, lane.workload(launcher.model_root(session.root), session.root))
    plan = MeasurementPlan(cand=side, best=side, protocol=lane.performance, prompts=prompts, batch=lane.batch,
                           metric=lane.primary_metric, is_cuda=lane.is_cuda, log_dir=run_dir, max_segments=1,
                           resolution=lane.resolution, memory=memory_budget(session) if lane.is_cuda else None,
                           known_peaks_mb=Sides(peak_mb, peak_mb))
    if live is None:
        return measure(plan, launcher)
    live.phase("A/A timing: the baseline against itself in two fresh workers")
    bar = TimingProgress(live.stream, live.tty, lane.performance.rounds, 1, desc="A/A timing")
    return measure(plan, launcher, on_round=bar.on_round, on_look=bar.on_look)


def _flags(session: Session, busy: str | None, sandboxed: bool) -> str:
    """How this baseline differs from a plain one: a declared new origin, a busy machine, no sandbox."""
    origin = session.require_current_layout().new_origin_from
    flags = [f"new-baseline (replaces {origin})" if origin else "", "busy-machine" if busy else "",
             "" if sandboxed else "unsandboxed"]
    return "; ".join(f for f in flags if f)


def run_baseline(config_path: Path, out: Callable[[str], None] = print, progress: bool = True,
                 sandboxed: bool = True, judge_only: bool = False, run_id: str = "") -> int:
    """Take the lane's baseline; a fleet's judge (`judge_only`, in its slot) writes the outcome into the run
    folder for the session's own process to record (loop/conclusion.py), under the driver's `run_id`."""
    session = open_session(config_path)
    held = gpu_locks.acquire_lane(session.target)
    try:
        code = _baseline(session, out, progress, sandboxed, judge_only, run_id)
    finally:
        gpu_locks.release(held)
    if sandboxed and not judge_only:
        warm_servers.start_next(session, config_path)  # the first experiment's, detached
    return code


def _baseline(session: Session, out: Callable[[str], None], progress: bool, sandboxed: bool,
              judge_only: bool = False, run_id: str = "") -> int:
    repo = _check_preconditions(session)
    lane = session.lane
    task_metrics.check_available(lane.task_metrics, lane.quality, session.root)
    commit = gitops.head_sha(repo)
    cases = load_corpus(session.root / lane.corpus)
    run_dir = session.paths.run(run_id or new_run_id(commit))
    started = time.perf_counter()

    launcher = launcher_for(session, sandboxed)
    key = session.started.seed_key
    live = Live(sys.stdout, sys.stdout.isatty()) if progress else None  # beside the lines `out` prints
    if live is not None:
        live.phase("baseline: starting the worker")
    metrics.prefetch()  # torchmetrics' import beside the worker's start, not before it
    with launcher.worker("baseline", session.root, RunPaths(run_dir).worker_log("baseline")) as worker:
        build = worker.request("build", spec=lane.workload(launcher.model_root(session.root), session.root))
        out(f"built {lane.preset} on {worker.device_name} in {build['build_s']:.1f} s")
        default = generate_corpus(worker, cases, lane.batch, key, lane.resolution, live=live,
                                  desc="baseline corpus")
        evidence = audit_evidence(worker, build, default, cases, lane.batch, key)
        envelope_runs, task_envelope, rerun_scores = _envelope_runs(session, worker, cases, default, live)
        held_out = holdout.holdout_cases(session)  # generated now, judged by `dit-ar revalidate` and the tests
        held_outputs = holdout.generate(worker, session, held_out, live=live) if held_out else None
        resolution = quality_cases.resolution(session, cases, default, rerun_scores)
        spread = quality_cases.store_baseline_scores(session, worker, cases, default,
                                                     (held_out, held_outputs) if held_out and held_outputs else None,
                                                     live, resolution)
        roof = profiling.roofline_evidence(worker, [list(c.keyed_request(key)) for c in cases[:lane.batch]])
        identity = dict(worker.identity)
        worker.note_start(build["build_s"] + default.first_s)
        peak_mb = worker.gpu_memory_mb() if lane.is_cuda else None
        worker.note_peak(peak_mb)
    layout = memory_plan.layout(memory_budget(session), None, peak_mb)
    if layout.mode == "refuse":
        raise Refused(layout.reason)
    out(profiling.describe_roofline(roof))

    for case in cases:
        save_case(cases_dir(session.baseline_dir), case.id, default.images[case.id], default.latents[case.id])
    if held_out and held_outputs:
        holdout.save(session.baseline_dir, held_out, held_outputs)
    scores = task_metrics.compute(lane.task_metrics, default.images, cases, session.root, lane.quality)
    envelope = envelope_of(envelope_runs)
    out(f"noise envelope over {len(envelope_runs)} perturbation{'s' if len(envelope_runs) != 1 else ''} "
        f"({', '.join(envelope_runs)}): " +
        ", ".join(f"{k}={v:.3g}" for k, v in envelope.items()))

    perf = _aa_timing(session, launcher, run_dir, tuple(c.prompt for c in cases), live, peak_mb)
    aa = perf.look
    assert aa is not None
    median_ms, p95_ms = perf.median_ms(Role.BEST), perf.p95_ms(Role.BEST)
    scale_pct = 100 * perf.segments[0].look.standard_error if perf.segments[0].look else float("nan")
    out(f"baseline latency {median_ms:.1f} ms per batch of {lane.batch}; A/A noise: {aa.estimate_pct:+.2f}% "
        f"between two fresh processes of the same tree (standard error {scale_pct:.2f}%)")
    busy = busy_warning(MachineLoad(aa_pct=aa.estimate_pct, median_ms=median_ms, p95_ms=p95_ms,
                                    load_average=os.getloadavg()[0], cores=os.cpu_count() or 1,
                                    threads=lane.performance.threads))
    if busy:
        out(busy)

    summary = BaselineSummary(
        lane=lane.name, lane_id=session.lane_id, commit=commit, run_id=run_dir.name, created=now(),
        cases=tuple(c.id for c in cases), corpus_sha256=sha256_file(session.root / lane.corpus),
        workload=lane.workload(session.root),
        environment={**versions.collect(), "device": identity, "python": platform.python_version()},
        evidence=evidence.as_dict(), envelope=envelope, envelope_runs=envelope_runs,
        task_metrics={k: v.value for k, v in scores.items()}, task_case_pass=task_metrics.case_passes(scores),
        task_envelope=task_envelope, task_resolution=resolution, task_spread=spread,
        timing=BaselineTiming(median_ms=median_ms, p95_ms=p95_ms, noise_floor_pct=abs(aa.estimate_pct),
                              noise_interval_pct=(aa.lower_pct, aa.upper_pct), seconds=perf.seconds,
                              aa_segment=perf.segments[0].to_dict()),
        roofline=Roofline(**roof), generation_seconds=default.seconds)
    quality = "; ".join(f"{k}={v.value:.4g}" for k, v in scores.items()) or "fidelity reference"
    row = LedgerRow(timestamp=now(), run_id=run_dir.name, lane=session.lane_id, commit=commit, parent="",
                    status=Status.BASELINE, metric=lane.primary_metric, candidate=lane.metric_value(median_ms),
                    peak_vram_mb=perf.peak_memory_mb(Role.BEST), quality_summary=quality, description="baseline",
                    run_dir=str(run_dir.relative_to(session.root)), flags=_flags(session, busy, sandboxed))
    if judge_only:
        write_record(RunPaths(run_dir).baseline, summary.as_dict())
        conclusion.write_baseline(conclusion.BaselineOutcome(summary, row), run_dir)
    else:
        records.record_baseline(session, repo, summary, row, run_dir)
    out(f"baseline of lane {session.lane_id} stored in {session.baseline_dir.relative_to(session.root)} "
        f"({len(cases)} cases, {time.perf_counter() - started:.0f} s)")
    if scores:
        out("task metrics: " + quality)
    return 0
