"""`dit-ar doctor`: what this machine is, what the contract asks for, and which lanes can run here."""

from __future__ import annotations

from pathlib import Path

from dit_ar_contract import device, versions
from dit_ar_contract.config import load_config
from dit_ar_contract.errors import EXIT_DISCARD, EXIT_OK

from ..state.paths import StatePaths
from ..state.session import read_record


def _lane_problems(config, lane, target) -> list[str]:
    """What stops a lane from running here, each with how to fix it."""
    problems = []
    if not target.runnable:
        problems.append(target.problem)
    if lane.weights and not (config.root / lane.weights).exists() and not Path(lane.weights).exists():
        problems.append(f"weights folder {lane.weights} is missing: put a diffusers folder there "
                        "(weights are never downloaded)")
    try:
        from quality_suite.corpora import verify_checksum

        verify_checksum(config.root / lane.corpus)
    except Exception as exc:  # reported, not raised: doctor lists every problem at once
        problems.append(str(exc))
    return problems


def doctor(config_path: Path, out=print) -> int:
    info = versions.collect()
    out("software: " + ", ".join(f"{k} {v}" for k, v in info.items() if v))
    missing = [k for k in ("torch", "diffusers", "torchmetrics", "open_clip_torch", "gitpython") if not info.get(k)]
    if missing:
        out(f"MISSING packages: {missing} — install with `pip install -e .` from the repo root")
    config = load_config(config_path)
    t = config.target
    out(f"target: {t.name} (sm_{t.compute_capability.replace('.', '')}, {t.vram_gb:g} GB, {t.gpu_count} GPU, "
        f"{t.peak_tflops_bf16:g} TFLOP/s bf16 dense, {t.memory_bandwidth_gbs:g} GB/s); "
        f"foreign lanes {'allowed' if t.allow_foreign_lanes else 'refused'}")
    gpus = device.list_gpus()
    out(f"cpu: {device.cpu_name()}")
    if not gpus:
        out(f"gpu: none found — this machine is NOT the target {t.name}; only CPU lanes can run here")
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
            out(f"lane {lane.name}: runs here as {target.lane_id} on {target.identity.name}")
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
