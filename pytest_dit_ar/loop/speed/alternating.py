"""A segment with one worker alive at a time, for a pair that does not fit the card together (loop/workers/memory_plan).

The sides run in `memory_plan.order(index, first)`: a fresh worker of the first side is built, warms up (until
steady) and runs the segment's requests, then exits; a fresh worker of the other side runs the same requests
(forked from the side's fork server when the experiment has them, as a pair's workers are: a zygote holds no
device memory). Round i of each side is paired (same requests, different processes, `rounds` rounds apart in
time); the sequential test's between-segment term carries what separates the two processes, and swapping the
order every segment cancels a drift in time.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from dit_ar_contract.sides import ROLES, Role, Sides

from ...state.perf_record import MemoryFigures, SegmentRecord
from ...worker.client import Generated, WorkerLauncher, WorkerProcess
from ...worker.forkserver import ForkedWorker, ForkServers
from ..workers import memory_plan
from .measurement_plan import MeasurementPlan, RoundCallback, Side
from .pairs import boot
from .segment import Requests, collisions, mark_steady, memory_figures, sampled_peak, sampled_steady, sampler, warm_up


def one_worker(launcher: WorkerLauncher, forks: ForkServers | None, side: Side, role: Role, log_dir: Path,
               index: int) -> WorkerProcess:
    """A fresh worker of one side: forked from its fork server when there is one, else exec'd."""
    if forks is None:
        return launcher.worker(side.name, side.root, log_dir / f"worker-{side.name}-segment{index}.log").spawn()
    forks.ready()
    return forks.side(role).fork(f"segment{index}")


def count_alternating(seconds: dict[str, float], seg: SegmentRecord, wall_s: float) -> None:
    """An alternating segment's wall time in the experiment's phases: its processes' start and build as
    startup, their close as teardown, warm-up and timed rounds, and the rest (reading and checking the
    outputs, the memory sampler) as round checks, as a pair's segment counts them."""
    parts = {"startup": seg.spawn_s + sum(seg.build_s.values()), "teardown": seg.close_s,
             "warmup": seg.warmup_wall_s,
             "timed": sum(seg.cand_s) + sum(seg.best_s)}
    parts["round_checks"] = max(0.0, wall_s - sum(parts.values()))
    for phase, spent in parts.items():
        seconds[phase] = seconds.get(phase, 0.0) + spent


class _SideRun:
    """What one side's worker measured in an alternating segment."""

    def __init__(self) -> None:
        self.got: list[Generated] = []
        self.warm: list[float] = []
        self.state = ""
        self.build_s = 0.0
        self.memory = MemoryFigures()
        self.warm_cache: bool | None = None


def run_alternating_segment(launcher: WorkerLauncher, plan: MeasurementPlan, index: int, first: Role,
                            rng: random.Random, on_round: RoundCallback | None = None,
                            forks: ForkServers | None = None) -> SegmentRecord:
    """One segment with one worker alive at a time (the module's docstring says how it pairs the rounds)."""
    rule = plan.warmup_rule()
    requests: list[Requests] = [[[rng.choice(plan.prompts), rng.randrange(2**31)] for _ in range(plan.batch)]
                                for _ in range(plan.protocol.rounds)]
    order = memory_plan.order(index, first)
    runs = {role: _SideRun() for role in ROLES}
    live_peak = spawn_s = close_s = 0.0
    for k, role in enumerate(order):
        run, side = runs[role], plan.sides[role]
        t_spawn = time.perf_counter()
        worker = one_worker(launcher, forks, side, role, plan.log_dir, index)
        spawn_s += time.perf_counter() - t_spawn
        try:
            watch = sampler({role: worker})
            try:
                run.build_s = boot(worker, side.spec)
                if forks is not None and isinstance(worker, ForkedWorker):
                    forks.side(role).note_ready(worker)
                worker.pin(plan.protocol.cpu_affinity)
                run.warm, run.state = warm_up(worker, lambda: [[rng.choice(plan.prompts), rng.randrange(2**31)]
                                                               for _ in range(plan.batch)], rule, plan.resolution)
                worker.note_start(run.build_s + sum(run.warm))
                mark_steady([worker], watch)
                for done, reqs in enumerate(requests):
                    run.got.append(worker.generate(reqs, resolution=plan.resolution))
                    if on_round:
                        on_round(index, k * len(requests) // 2 + (done + 1) // 2, len(requests))
            finally:
                if watch is not None:
                    watch.stop()
            run.memory = memory_figures(worker, run.got[-1].memory if run.got else {}, sampled_peak(watch, role),
                                        sampled_steady(watch, role))
            worker.note_peak(run.memory.device_mb)
            live_peak = max(live_peak, watch.peak_sum_mb if watch else 0.0)
            run.warm_cache = worker.cache_warm
        finally:
            t_close = time.perf_counter()
            worker.close()
            close_s += time.perf_counter() - t_close
    problems: list[str] = []
    for role in ROLES:
        problems += collisions(role, requests, runs[role].got)
    if plan.check is not None:
        for done, (c, b) in enumerate(zip(runs[Role.CANDIDATE].got, runs[Role.BEST].got)):
            problems += [f"round {done + 1}: {p}" for p in plan.check(c, b)]
    if plan.collect is not None:
        for reqs, c, b in zip(requests, runs[Role.CANDIDATE].got, runs[Role.BEST].got):
            plan.collect(reqs, c, b)
    sides = Sides.of(runs.__getitem__)
    return SegmentRecord(index, [g.seconds for g in sides.candidate.got], [g.seconds for g in sides.best.got],
                         [[s for _, s in reqs] for reqs in requests],
                         ["CB" if order[0] is Role.CANDIDATE else "BC"] * len(requests), sides.map(lambda r: r.warm),
                         sides.map(lambda r: r.build_s), sides.map(lambda r: r.memory), problems[:20], fresh=True,
                         warmup_state=sides.map(lambda r: r.state), warm_cache=sides.map(lambda r: r.warm_cache),
                         forked=forks is not None, layout="alternate", live_peak_mb=live_peak or None,
                         spawn_s=spawn_s, close_s=close_s)
