"""`dit-ar baseline`: outputs, noise envelope, task scores and timing of the unmodified pipeline."""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Any

from perf_suite import profiling, timing
from quality_suite import task_metrics
from quality_suite.artifacts import envelope_of, per_case_fidelity, save_case
from quality_suite.corpora import load_corpus

from . import backup, gitops, integrity, ledger, versions
from .best import record_best
from .context import Context, load_context, metric_value, new_run_id, verify_session_integrity
from .errors import Refused
from .generation import evidence, generate_corpus
from .state import write_json_atomic
from .workers import WorkerProcess


def perturbations(ctx: Context) -> dict[str, dict[str, Any]]:
    """Benign, mathematically-equivalent ways to run the same baseline (for the exact envelope)."""
    runs: dict[str, dict[str, Any]] = {"split-batch": {"batch": 1}, "reversed-batches": {"reverse": True}}
    if ctx.lane.is_cuda:
        runs["sdpa-math"] = {"perturb": {"sdpa": "math"}}
    else:
        runs["one-thread"] = {"perturb": {"threads": 1}}
    return runs


def _check_preconditions(ctx: Context) -> Any:
    repo = gitops.open_repo(ctx.root)
    gitops.require_branch(repo, ctx.session["tag"])
    gitops.require_clean(repo)
    if gitops.head_sha(repo) != ctx.session["baseline_commit"]:
        raise Refused(f"HEAD is not the session's baseline commit {ctx.session['baseline_commit'][:10]}: "
                      "the baseline is taken from the unmodified pipeline")
    if (ctx.baseline_dir / integrity.MANIFEST).exists():
        raise Refused(f"lane {ctx.lane_id} already has a baseline ({ctx.baseline_dir}); the original baseline "
                      "is never replaced — start a new session with `dit-ar init --tag NEW` for a fresh one")
    problems = verify_session_integrity(ctx)
    if problems:
        raise Refused("fixed files differ from integrity.json: " + "; ".join(problems[:5]))
    return repo


def run_baseline(config_path: Path, out=print, progress: bool = True) -> int:
    ctx = load_context(config_path)
    repo = _check_preconditions(ctx)
    task_metrics.check_available(ctx.lane.task_metrics, ctx.lane, ctx.root)
    commit = gitops.head_sha(repo)
    cases = load_corpus(ctx.root / ctx.lane.corpus)
    spec = ctx.lane.workload(ctx.root)
    run_id = new_run_id(commit)
    run_dir = ctx.paths.run(run_id)
    folder = ctx.baseline_dir
    started = time.perf_counter()

    with WorkerProcess("baseline", ctx.root, ctx.target, ctx.threads, run_dir / "worker-baseline.log",
                       float(ctx.lane.performance["round_timeout_s"])) as worker:
        build = worker.request("build", spec=spec)
        out(f"built {ctx.lane.preset} on {worker.identity.get('name')} in {build['build_s']:.1f} s")
        default = generate_corpus(worker, cases, ctx.lane.batch, progress=progress, desc="baseline corpus")
        envelope_runs = {}
        for name, how in perturbations(ctx).items():
            order = list(reversed(cases)) if how.get("reverse") else cases
            alt = generate_corpus(worker, order, how.get("batch", ctx.lane.batch), perturb=how.get("perturb"),
                                  progress=progress, desc=f"envelope {name}")
            envelope_runs[name] = per_case_fidelity(alt.images, alt.latents, default.images, default.latents)
        roof = profiling.roofline_evidence(worker, [list(c.request) for c in cases[:ctx.lane.batch]])
        identity = worker.identity
    out(profiling.describe_roofline(roof))

    for case in cases:
        save_case(folder / "cases", case.id, default.images[case.id], default.latents[case.id])
    scores = task_metrics.compute(ctx.lane.task_metrics, default.images, cases, ctx.root, ctx.lane.quality)
    envelope = envelope_of(envelope_runs)
    out(f"noise envelope over {len(envelope_runs)} perturbations: " +
        ", ".join(f"{k}={v:.3g}" for k, v in envelope.items()))

    prompts = [c.prompt for c in cases]
    side = timing.SideSpec("baseline", ctx.root, spec)
    perf = timing.measure(side, side, ctx.target, ctx.lane.performance, prompts, ctx.lane.batch,
                          ctx.lane.primary_metric, {}, ctx.lane.is_cuda, run_dir, max_blocks=1)
    aa = perf.blocks[0].stats
    out(f"baseline latency {aa.best_median_ms:.1f} ms per batch of {ctx.lane.batch}; "
        f"A/A noise: {aa.improvement_pct:+.2f}% (p={aa.p_value:.2g})")

    timing_info = {"median_ms": aa.best_median_ms, "p95_ms": aa.best_p95_ms, "aa_block": perf.blocks[0].as_dict(),
                   "noise_floor_pct": abs(aa.improvement_pct),
                   "noise_ci_ratio": [aa.ci_lower_ratio, aa.ci_upper_ratio], "seconds": perf.seconds}
    summary = {
        "lane": ctx.lane.name, "lane_id": ctx.lane_id, "commit": commit, "run_id": run_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "workload": spec, "cases": [c.id for c in cases],
        "corpus_sha256": integrity.sha256_file(ctx.root / ctx.lane.corpus),
        "environment": {**versions.collect(), "device": identity, "python": platform.python_version()},
        "evidence": evidence(build, default), "envelope": envelope, "envelope_runs": envelope_runs,
        "task_metrics": {k: v.value for k, v in scores.items()},
        "task_case_pass": task_metrics.case_passes(scores), "timing": timing_info,
        "generation_seconds": default.seconds, **roof,
    }
    write_json_atomic(folder / "baseline.json", summary)
    manifest = {"lane_id": ctx.lane_id, "commit": commit, "files": integrity.manifest_of(folder)}
    write_json_atomic(folder / integrity.MANIFEST, manifest)
    backup.save_folder(repo, folder, gitops.baseline_ref(ctx.session["tag"], ctx.lane_id),
                       f"dit-ar baseline of {ctx.lane_id} at {commit[:10]}")
    session = dict(ctx.session)
    session.setdefault("baselines", {})[ctx.lane_id] = {
        "manifest_sha256": integrity.sha256_file(folder / integrity.MANIFEST), "commit": commit, "run_id": run_id}
    write_json_atomic(ctx.paths.session, session)
    ctx.session = session
    record_best(ctx, repo, commit, run_id, {"median_ms": aa.best_median_ms, "p95_ms": aa.best_p95_ms})
    write_json_atomic(run_dir / "baseline.json", summary)
    quality = "; ".join(f"{k}={v.value:.4g}" for k, v in scores.items()) or "fidelity reference"
    ledger.append(ctx.paths.ledger, {
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "run_id": run_id, "lane": ctx.lane_id,
        "commit": commit, "parent": "", "status": "baseline", "declared_class": "", "effective_class": "",
        "metric": ctx.lane.primary_metric, "best_before": "", "candidate": metric_value(aa.best_median_ms, ctx.lane),
        "improvement_pct": "", "p_value": "", "peak_vram_mb": timing.peak_memory_mb(perf.blocks[0], "best"),
        "quality_summary": quality, "description": "baseline", "run_dir": str(run_dir.relative_to(ctx.root)),
    })
    out(f"baseline of lane {ctx.lane_id} stored in {folder.relative_to(ctx.root)} "
        f"({len(cases)} cases, {time.perf_counter() - started:.0f} s)")
    if scores:
        out("task metrics: " + quality)
    return 0
