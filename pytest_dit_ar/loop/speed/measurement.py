"""The performance verdict: candidate against best, each side in its own worker process
(docs/design/speed-verdict.md), segment by
segment, until the sequential test (perf_suite.sequential) decides.

A *segment* is one pair of fresh workers, warmed up, then timed for `rounds` paired rounds (loop/speed/segment.py);
a pair that does not fit the card together runs one side at a time (loop/speed/alternating.py). After each segment the
sequential test looks at all segments so far and keeps, discards or asks for another segment in new processes
(loop/speed/pairs.py: where the pairs come from). With `performance.pairs > 1` the pairs run concurrently instead,
rounds dealt over them (`measure_concurrent`). The result is the run's perf.json record (state/perf_record.py).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from dit_ar_contract.errors import Refused
from dit_ar_contract.sides import ROLES, Role, Sides
from perf_suite import guardrails as guard
from perf_suite.sequential import DECISIONS, KEEP, Look, PairSpread, SequentialTest

from ...state.perf_record import PerfRecord, SegmentRecord
from ...worker.client import WorkerLauncher
from ...worker.forkserver import ForkServers
from ..workers import memory_plan
from .alternating import count_alternating, run_alternating_segment
from .clean_rounds import GpuWatch
from .measurement_plan import MeasurementPlan, RoundCallback
from .pairs import Pair, PairSource, gpu_watch, timed_cores, warm_cores
from .segment import SegmentRun, memory_figures, run_segment

LookCallback = Callable[[Look], None]
KEPT = DECISIONS[KEEP]  # the look's decision that keeps the candidate


def measure(plan: MeasurementPlan, launcher: WorkerLauncher, first_pair: Pair | None = None,
            on_round: RoundCallback | None = None, on_look: LookCallback | None = None,
            forks: ForkServers | None = None) -> PerfRecord:
    """The whole performance verdict: segments in fresh worker pairs until the sequential test decides.

    The first pair may be the quality run's; the others come from `forks` (the sides' fork servers)
    when given, else from fresh exec'd workers. No pair starts or builds during timed rounds."""
    rng = random.SystemRandom()
    test = SequentialTest(plan.design(), plan.offset_bound())
    seconds = {"startup": 0.0, "warmup": 0.0, "timed": 0.0}
    source = PairSource(plan, launcher, forks, timed_cores(plan.protocol, plan.is_cuda))
    if test.design.concurrent:  # performance.pairs > 1: rounds dealt over concurrent pairs
        try:
            return measure_concurrent(plan, test, source, first_pair, forks, on_round, on_look, seconds)
        finally:
            source.kill()
    run = _Sequence(plan, launcher, test, source, forks, seconds, rng)
    try:
        return run.until_decided(first_pair, on_round, on_look)
    finally:
        run.kill()
        source.kill()


class _Sequence:
    """The segments of one verdict, one after another, and what they cost (`seconds`, by phase)."""

    def __init__(self, plan: MeasurementPlan, launcher: WorkerLauncher, test: SequentialTest, source: PairSource,
                 forks: ForkServers | None, seconds: dict[str, float], rng: random.Random):
        self.plan, self.launcher, self.test, self.source, self.forks = plan, launcher, test, source, forks
        self.seconds, self.rng = seconds, rng
        self.segments: list[SegmentRecord] = []
        self.guard_info: dict[str, Any] = {}
        self.peaks: Sides[float | None] = plan.known_peaks_mb
        self.pair: Pair | None = None  # workers already booted (the quality run's candidate and a best)
        self.watch: GpuWatch | None = None

    def outcome(self, keep: bool, reasons: list[str], spread: PairSpread | None = None) -> PerfRecord:
        return PerfRecord(keep, reasons, self.segments, self.seconds, self.guard_info, self.source.as_dict(), spread)

    def until_decided(self, first_pair: Pair | None, on_round: RoundCallback | None,
                      on_look: LookCallback | None) -> PerfRecord:
        plan = self.plan
        self.pair = first_pair
        first_alone = self.rng.choice(ROLES)  # alternating segments: which side goes first in even segments
        for index in range(plan.segments_allowed()):
            layout = memory_plan.layout(plan.memory, *self.peaks.values()) if plan.memory else None
            if layout is not None and layout.mode == "refuse":
                raise Refused(layout.reason)
            if layout is not None:
                self.guard_info["memory_layout"] = layout.reason
            if layout is not None and layout.mode == "alternate":
                if self.pair is not None:  # the card cannot hold the first pair
                    self.pair.close()
                    self.pair = None
                t_seg = time.perf_counter()
                seg = run_alternating_segment(self.launcher, plan, index, first_alone, self.rng, on_round,
                                              self.forks)
                count_alternating(self.seconds, seg, time.perf_counter() - t_seg)
            else:
                seg = self.pair_segment(index, on_round)
            done = self.judge(index, seg, on_look)
            if done is not None:
                return done
        raise AssertionError("the sequential test always decides by its last segment")

    def pair_segment(self, index: int, on_round: RoundCallback | None) -> SegmentRecord:
        """One segment in a pair (the first pair, else the source's next), closed after it."""
        plan, seconds = self.plan, self.seconds
        t0 = time.perf_counter()
        if self.pair is None:
            self.pair = self.source.take(index, plan.segments_allowed() - index)
        pair = self.pair
        if self.forks is not None:
            t_wait = time.perf_counter()
            self.forks.ready()  # the fork servers' imports never overlap timed rounds
            waited = time.perf_counter() - t_wait
            seconds["fork_servers_wait"] = seconds.get("fork_servers_wait", 0.0) + waited
            t0 += waited
        cores = self.source.cores
        pair.pin(cores)
        if self.watch is None:
            self.watch = gpu_watch(pair, plan.is_cuda)
        seconds["startup"] += time.perf_counter() - t0
        self.source.spawn_ahead(index + 1)
        t_seg = time.perf_counter()
        seg = run_segment(pair, index, plan.prompts, plan.batch, plan.protocol.rounds, plan.warmup_rule(), self.rng,
                          on_round, plan.resolution, plan.check, self.watch,
                          warm_cores=warm_cores(cores, plan.is_cuda), cores=cores, collect=plan.collect)
        for role, worker in pair.workers.items():
            seen = seg.peak_memory_mb(role) if plan.is_cuda else None
            if seen:
                self.peaks = self.peaks.replace(role, max(self.peaks[role] or 0.0, seen))
            note_peak = getattr(worker, "note_peak", None)
            if note_peak is not None:
                note_peak(seen)
        t_close = time.perf_counter()
        # between the round trips: reading, hashing and checking the outputs, freezing, the GPU watch
        seconds["round_checks"] = seconds.get("round_checks", 0.0) + (t_close - t_seg) - sum(
            seg.cand_s + seg.best_s) - seg.warmup_wall_s
        pair.close()
        self.pair = None
        seconds["teardown"] = seconds.get("teardown", 0.0) + time.perf_counter() - t_close
        seconds["warmup"] += seg.warmup_wall_s
        seconds["timed"] += sum(seg.cand_s) + sum(seg.best_s)
        if index == 0:
            self.source.size_from(seg)
        return seg

    def judge(self, index: int, seg: SegmentRecord, on_look: LookCallback | None) -> PerfRecord | None:
        """The sequential test's look after this segment, then the faithfulness and guardrail checks: the
        verdict when one of them decides, else None (another segment)."""
        plan = self.plan
        seg.look = self.test.add(seg.cand_s, seg.best_s)
        self.segments.append(seg)
        if on_look:
            on_look(seg.look)
        if seg.unfaithful:
            return self.outcome(False, [f"segment {index + 1}: {msg}" for msg in seg.unfaithful[:5]])
        problems, figures = guardrail_problems(plan, self.segments, final=seg.look.final)
        self.guard_info.update(figures)
        if seg.escaped:  # a side moved threads off the timed core: its times are not comparable
            problems.append(f"left the timed cores during timed rounds ({len(seg.escaped)} found, first: "
                            f"{seg.escaped[0]}); the harness pins both sides to the same cores")
        if seg.layout == "pair" and plan.roofline_ms and seg.median_ms(Role.CANDIDATE) < plan.roofline_ms:
            problems.append(f"candidate median {seg.median_ms(Role.CANDIDATE):.2f} ms is below the roofline "
                            f"floor {plan.roofline_ms:.2f} ms: the measurement cannot be right")
        if problems:
            return self.outcome(False, [f"segment {index + 1}: {msg}" for msg in problems])
        if seg.look.final:
            return self.outcome(seg.look.decision == KEPT, [seg.look.reason], self.test.spread())
        return None

    def kill(self) -> None:
        if self.pair is not None:
            self.pair.kill()


def measure_concurrent(plan: MeasurementPlan, test: SequentialTest, source: PairSource, first_pair: Pair | None,
                       forks: ForkServers | None, on_round: RoundCallback | None,
                       on_look: LookCallback | None, seconds: dict[str, float]) -> PerfRecord:
    """The concurrent layout: `design.pairs` pairs started and warmed before any timed round, then rounds dealt
    round-robin over them (each pair alternating CB/BC), a look whenever the test's next look point is reached
    (`test.next_look()`: pairs and rounds per pair; `test.update`)."""
    m = int(test.design.pairs)
    p = plan.protocol
    pairs: list[Pair] = [first_pair] if first_pair is not None else []
    runs: list[SegmentRun] = []
    rng = random.SystemRandom()
    try:
        t0 = time.perf_counter()
        if forks is not None:
            forks.ready()
        if pairs:
            _refuse_unless_fits(source, pairs[0], m)
        while len(pairs) < m:
            pairs += source.start(len(pairs), m - len(pairs))
        for pair in pairs:
            pair.pin(source.cores)
            pair.freeze()
        watch = gpu_watch(pairs[0], plan.is_cuda)
        runs = [SegmentRun(pair, i, plan.prompts, plan.batch, rng, plan.resolution, plan.check, watch, plan.collect)
                for i, pair in enumerate(pairs)]
        for run in runs:
            run.cores = source.cores
        seconds["startup"] += time.perf_counter() - t0
        for run in runs:
            run.warm_up(p.warmup_rounds)
            seconds["warmup"] += sum(run.warm.candidate) + sum(run.warm.best)
        while (point := test.next_look()) is not None:
            while min(len(r.orders) for r in runs[:point.pairs]) < point.rounds:
                for run in runs[:point.pairs]:
                    if len(run.orders) < point.rounds:
                        seconds["timed"] += run.play_round()
                if on_round:
                    on_round(0, min(len(r.orders) for r in runs[:point.pairs]), point.rounds)
            segments = [r.record() for r in runs[:point.pairs]]
            look = test.update([s.cand_s for s in segments], [s.best_s for s in segments])
            segments[-1].look = look
            if on_look:
                on_look(look)
            done = PerfRecord(False, [], segments, seconds, {}, source.as_dict())
            unfaithful = [f"pair {s.index + 1}: {msg}" for s in segments for msg in s.unfaithful]
            if unfaithful:
                done.reasons = unfaithful[:5]
                return done
            problems, done.guardrails = guardrail_problems(plan, segments, final=look.final)
            problems += [f"pair {s.index + 1}: left the timed cores: {e}" for s in segments for e in s.escaped[:1]]
            if problems:
                done.reasons = problems
                return done
            if look.final:
                done.keep, done.reasons, done.spread = look.decision == KEPT, [look.reason], test.spread()
                return done
        raise AssertionError("the sequential test always decides by its last look")
    except BaseException:
        for pair in pairs:
            pair.kill()
        raise
    finally:
        for pair in pairs:
            pair.close()


def _refuse_unless_fits(source: PairSource, pair: Pair, m: int) -> None:
    """Concurrent pairs hold their memory together: refuse when `m` pairs of the first pair's size do not
    fit the budget (the measured peaks so far: the quality run's corpus)."""
    seg = SegmentRecord(0, [], [], memory=pair.workers.map(lambda w: memory_figures(w, {})))
    source.size_from(seg, most=m)
    if source.pool.pairs < m and source.pool.per_pair_mb:
        raise Refused(f"performance.pairs = {m} concurrent pairs need {m * source.pool.per_pair_mb:.0f} MB but "
                      f"{source.pool.budget_mb:.0f} MB fit {source.pool.pairs}: set performance.pairs to "
                      f"{max(1, source.pool.pairs)}")


def guardrail_problems(plan: MeasurementPlan, segments: list[SegmentRecord], final: bool
                       ) -> tuple[list[str], dict[str, Any]]:
    """Memory (every segment: the whole-run peak against the budget, the steady peak after warm-up against the
    best's), the warm start-up and tail latency (all segments' figures, judged at the end)."""
    peaks = Sides.of(lambda r: max((m for m in (s.peak_memory_mb(r) for s in segments) if m is not None),
                                   default=None))
    g = plan.guardrails
    if plan.is_cuda:
        budget = g.peak_vram_gb * 1024.0 if g.peak_vram_gb else None
        if g.emulated_vram_gb and plan.memory is not None and plan.memory.mb is not None:
            budget = min(budget or plan.memory.mb, plan.memory.mb)  # one worker may not exceed the emulated card
    else:
        budget = g.peak_memory_mb
    mem = guard.memory(peaks.candidate, peaks.best, budget)  # the whole run: a budget is a hard limit
    steady = Sides.of(lambda r: max((m for m in (s.steady_memory_mb(r) for s in segments) if m is not None),
                                    default=None))
    growth = guard.memory_growth(steady.candidate, steady.best, g.memory_growth_pct)
    fresh = [s for s in segments if s.fresh]
    warm = [s for s in fresh if s.warm_cache.candidate is not False]  # cache filled (or no caches at all)
    starts = Sides.of(lambda r: [s.startup_s(r) for s in warm if s.warm_cache[r] is not False])
    startup = guard.startup_growth(starts.candidate, starts.best, g.startup_growth_pct)
    start_budget = guard.startup_budget(starts.candidate, g.startup_budget_s)
    tail = guard.tail_latency([s.cand_s for s in segments], [s.best_s for s in segments], g.p95_regression_pct)
    problems = [r.problem for r in (mem, growth) if r.problem]
    if final:  # judged on every segment's figures: one slow start or one tail is noise until the end
        problems += [r.problem for r in (start_budget, tail) if r.problem]
    cold = {"cand_cold_start_s": plan.cold_start_s} if plan.cold_start_s is not None else {}
    return problems, {**mem.figures, **growth.figures, **startup.figures, **start_budget.figures, **cold,
                      **tail.figures}
