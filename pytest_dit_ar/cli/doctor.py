"""`dit-ar doctor`: what this machine is, what the contract asks for, and which lanes can run here."""

from __future__ import annotations

from pathlib import Path

from dit_ar_contract import device, versions
from dit_ar_contract.config import load_config, repo_root_for
from dit_ar_contract.errors import EXIT_DISCARD, EXIT_OK
from dit_ar_contract.guides import cite

from ..state.paths import StatePaths
from ..state.session import read_record, session_lane_name
from .doctor_clip import clip_hints
from .install_advice import canonical, install_command, unmet


def _reason(name: str, why: str) -> str:
    """The first line of a metric's setup error, worded for a report rather than a refusal, and where to read on."""
    from quality_suite import task_metrics

    line = why.strip().splitlines()[0] if why.strip() else why
    line = line.replace(f"{name} is a required metric but ", "").rstrip(".")
    where = task_metrics.docs(name) if name in task_metrics.REGISTRY else ""
    return f"{line} (how to: {where})" if where else line


def _corpus(config, lane):
    """The lane's corpus cases, or None when it cannot be read (reported with the lane's problems)."""
    from quality_suite.corpora import load_corpus

    try:
        return load_corpus(config.root / lane.corpus)
    except Exception:  # noqa: BLE001 - the corpus problem is reported once, with the lane
        return None


def _metric_problems(config, lane) -> list[str]:
    """Why each task metric the lane requires cannot be computed here (its settings, weights, corpus labels)."""
    from quality_suite import task_metrics

    cases = _corpus(config, lane)
    problems = []
    for name in lane.task_metrics:
        why = task_metrics.problem(name, lane.quality, config.root, cases)
        if why is not None:
            problems.append(f"task metric {name} is not usable: {_reason(name, why)}")
    return problems


def task_metric_report(config, out=print) -> None:
    """The task metrics of the lane this machine would run (the session's, else the default): those it uses, usable
    here or why not, or, when it uses none, those that fit it; the others in one line."""
    from quality_suite import task_metrics

    lane = config.lanes[session_lane_name(config)]
    cases = _corpus(config, lane)
    labelled = any(c.label is not None for c in cases or [])
    shown = list(lane.task_metrics) or suited(lane.preset, labelled)
    out(f"task metrics of lane {lane.name}:" if lane.task_metrics else
        f"task metrics: lane {lane.name} uses none; what would fit it:")
    for name in shown:
        why = task_metrics.problem(name, lane.quality, config.root, cases)
        out(f"  {name}: {'usable' if why is None else f'NOT usable: {_reason(name, why)}'}")
        if name == "clip_score":
            for line in clip_hints(lane.quality.clip, config.root, lane.name):
                out(f"    {line}")
    others = [name for name in task_metrics.REGISTRY if name not in shown]
    if others:
        out(f"  other metrics (not for this lane): {', '.join(others)} ({cite('task-metrics')})")


def suited(preset: str, labelled: bool) -> list[str]:
    """The task metrics that fit a lane without one: the digit judge's on the embedded digits model, an ImageNet
    classifier's on a corpus of class labels, CLIP on a corpus of prompts."""
    if preset.startswith("embedded"):
        return ["judge_accuracy", "frechet_distance"]
    return ["classifier_top1"] if labelled else ["clip_score"]


def _lane_problems(config, lane, target) -> list[str]:
    """What stops a lane from running here, each with how to fix it."""
    problems = []
    if not target.runnable:
        problems.append(target.problem)
    if lane.weights and not (config.root / lane.weights).exists() and not Path(lane.weights).exists():
        problems.append(f"weights folder {lane.weights} is missing: put a diffusers folder there "
                        "(weights are never downloaded)")
    elif lane.weights:
        from ..worker.sandbox import unreadable_refusal

        refusal = unreadable_refusal(Path(lane.weights_path(config.root)), (config.root,))
        if refusal:
            problems.append(refusal)
    try:
        from quality_suite.corpora import verify_checksum

        verify_checksum(config.root / lane.corpus)
    except Exception as exc:  # reported, not raised: doctor lists every problem at once
        problems.append(str(exc))
    return problems + _metric_problems(config, lane)


def _metrics_note(lane) -> str:
    if not lane.task_metrics:
        return (f"no task metrics configured, so approximate and quantization changes cannot be kept (set "
                f'lanes.{lane.name}.task_metrics, e.g. "clip_score" with quality.clip.weights, which '
                '`dit-ar scaffold --clip-weights PATH` writes, or "classifier_top1" with quality.classifier)')
    return f"task metrics {', '.join(lane.task_metrics)} usable"


def doctor(config_path: Path, out=print) -> int:
    info = versions.collect(import_torch=False)  # doctor stays quick: nothing here needs torch imported
    out("software: " + ", ".join(f"{k} {v}" for k, v in info.items() if v))
    absent, wrong = unmet()  # the installed wheel's own requirements (an install with --no-deps leaves them)
    missing = [k for k in ("torch", "diffusers", "torchmetrics", "open_clip_torch", "gitpython") if not info.get(k)]
    missing += [name for name in absent if canonical(name) not in {canonical(k) for k in missing}]
    if missing:
        where = repo_root_for(config_path)
        out(f"MISSING packages: {', '.join(missing)} — install with {install_command(missing, where)} (pip keeps "
            "the packages you have, torch among them)")
    if wrong:
        out(f"packages in a version pytest-dit-ar does not accept: {'; '.join(wrong)}")
    config = load_config(config_path)
    t = config.target
    if t.is_cpu:
        out(f"target: {t.name}, a CPU (target.device cpu): the lanes run and are judged on this machine's CPU")
    else:
        out(f"target: {t.name} (sm_{t.compute_capability.replace('.', '')}, {t.vram_gb:g} GB, {t.gpu_count} GPU, "
            f"{t.peak_tflops_bf16:g} TFLOP/s bf16 dense, {t.memory_bandwidth_gbs:g} GB/s); "
            f"foreign lanes {'allowed' if t.allow_foreign_lanes else 'refused'}")
    gpus = device.list_gpus()
    out(f"cpu: {device.cpu_name()}")
    if not gpus:
        out("gpu: none found" + ("" if t.is_cpu else f" — this machine is NOT the target {t.name}; only CPU lanes "
                                                      "can run here"))
    for gpu in gpus:
        verdict = "matches the target" if device.matches_target(gpu, config) else \
            f"is NOT the target {t.name}: it runs as a foreign lane, labelled with its own name"
        out(f"gpu {gpu.index}: {gpu.name} (sm_{gpu.compute_capability.replace('.', '')}, {gpu.memory_gb:.0f} GB, "
            f"driver {gpu.driver}) {verdict}")
    out(f"config {config.path}: valid")
    from ..worker.sandbox import available as sandbox_problem

    problem = sandbox_problem()
    out("sandbox: bubblewrap works here (workers run isolated)" if problem is None else
        f"sandbox: NOT available: {problem}; `experiment` and `baseline` refuse without it")
    from ..worker import cgroup, sandbox, seccomp

    out(f"sandbox user: {'nobody (the harness runs as root)' if sandbox.privileged() else 'this user'}; seccomp "
        f"filter: {'yes' if seccomp.program() else 'none for this architecture'}; freeze and memory: "
        f"{cgroup.describe()} (without a writable freezer: SIGSTOP and /proc waits)")
    out(_memory_limit_line(cgroup.memory_limit_kind()))
    task_metric_report(config, out)
    from .doctor_budget import case_budget_lines, session_task_base

    for line in case_budget_lines(config, session_task_base(config)):
        out(line)
    runnable = []
    for lane in config.lanes.values():
        target = device.resolve_lane(config, lane, gpus)
        problems = _lane_problems(config, lane, target)
        if problems:
            out(f"lane {lane.name}: cannot run here")
            for p in problems:
                out(f"  - {p}")
        else:
            runnable.append(target.lane_id)
            out(f"lane {lane.name}: runs here as {target.lane_id} on {target.identity.name}; {_metrics_note(lane)}; "
                f"each worker's host memory limit {_limit_mb(lane):.0f} MiB")
    session = read_record(StatePaths(config.root))
    if session:
        out(f"session: tag {session.tag}, lane {session.lane_id}, baseline commit {session.baseline_commit[:10]}")
    else:
        out(f"session: none — next: dit-ar --config {config_path} init --tag mytag --lane {config.default_lane}")
    if not runnable:
        out("nothing can run on this machine")
        return EXIT_DISCARD
    out(f"lanes that can run here: {', '.join(runnable)}")
    return EXIT_OK


def _memory_limit_line(kind: str) -> str:
    """What holds each worker's hard host-memory limit here (worker/host_limit.py)."""
    if kind != "RLIMIT_DATA":
        return f"memory limit: each worker's own cgroup holds it, {kind}; beyond it the kernel kills that worker alone"
    return ("memory limit: NO writable memory cgroup here (cgroup v2 delegation or v1 memory): RLIMIT_DATA holds it "
            "instead, per process and blind to shared memory (docs/design/sandbox-and-security.md)")


def _limit_mb(lane) -> float:  # noqa: ANN001 - a config Lane
    from ..worker import host_limit

    return host_limit.worker_limit_mb(lane.guardrails.host_memory_mb)
