"""The candidate's worker lifecycle in an experiment: the quality run's worker, the best side's worker booted
beside it (both then stay up as the first timing pair), both sides' fork servers, and closing whatever is left.

`Evidence` hands in what this needs (the session, the launcher, the run folder, the trees, the workload specs)
and keeps the crash record; a crash here kills every worker it started before it is raised.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dit_ar_contract.config import WorkloadSpec
from dit_ar_contract.errors import CandidateCrash, Refused
from dit_ar_contract.sides import Role, Sides
from perf_suite.sequential import OffsetBound
from quality_suite import metrics
from quality_suite.assessment import TaskInputs
from quality_suite.corpora import Case

from ..state.perf_record import PerfRecord
from ..state.runs import RunPaths
from ..state.session import Session
from ..worker.client import WorkerLauncher, WorkerProcess
from ..worker.forkserver import ForkServers
from .quality import cases
from .quality.generation import CandidateRun, CorpusOutputs, audit_evidence, generate_corpus, quality_gaps
from .speed import warm_servers
from .speed.measurement import measure
from .speed.measurement_plan import MeasurementPlan, RoundCheck, RoundCollector, Side
from .speed.pairs import Pair, boot
from .speed.progress import TimingProgress
from .workers import first_worker, memory_plan
from .workers.live import Live


class PhaseClock:
    """Where an evidence's wall time went, by phase (seconds added up per phase name)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def spent(self, phase: str, since: float) -> float:
        """Add the time since `since` to `phase`; the time now (the next phase's start)."""
        now = time.perf_counter()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - since
        return now


def warm_history(session: Session, outputs: CorpusOutputs) -> list[float]:
    """The corpus generates the candidate's first warm-up reads as history (the lane's `reuse`): all but the first
    (where a compile or a graph capture lands). The best's worker only booted: it has none."""
    return list(outputs.times[1:]) if session.lane.performance.reuse else []


def note_quality_worker(worker: WorkerProcess, start_s: float, is_cuda: bool) -> tuple[float | None, float | None]:
    """Record the quality worker's start (build + first generate: where a compile happens) and device memory;
    returns the tree's cold start (this one when its cache was cold, else the tree's record) and that memory."""
    worker.note_start(start_s)
    cold_start_s = None
    if worker.cache_warm is False:
        cold_start_s = start_s
    elif worker.caches is not None and worker.cache_digest is not None:
        cold_start_s = worker.caches.record(worker.cache_digest).cold_start_s
    if not is_cuda:
        return cold_start_s, None
    peak_mb = worker.gpu_memory_mb()
    worker.note_peak(peak_mb)
    return cold_start_s, peak_mb


class CandidateWorkers:
    """The workers of one candidate's evidence, from the quality run until timing takes them over."""

    def __init__(self, session: Session, launcher: WorkerLauncher, run: RunPaths, candidate_root: Path,
                 best_root: Path | None, prefetch_best: bool, memory: memory_plan.MemoryBudget,
                 spec: Callable[[Path], WorkloadSpec], key: str):
        self.session, self.launcher, self.run = session, launcher, run
        self.candidate_root, self.best_root, self.prefetch_best = candidate_root, best_root, prefetch_best
        self.memory, self.spec, self.key = memory, spec, key
        self.first_pair: Pair | None = None  # the quality worker and the prefetched best, kept for timing
        self.forks: ForkServers | None = None  # both sides' fork servers, started beside the quality run
        self.cand_peak_mb: float | None = None  # the quality worker's device memory (NVML)
        self.cold_start_s: float | None = None  # the candidate tree's first worker: build + first generate
        self.warmup_reused = 0  # the quality run's generates the first warm-up read as history
        self.warm = warm_servers.WarmStart()  # pre-started servers the quality run's pair may be forked from

    def quality_run(self, cases: list[Case], clock: PhaseClock, live: Live | None) -> CandidateRun:
        """Build and run the candidate's pipeline on `cases` in a worker. While the candidate generates the
        corpus, the best side's worker boots, and both stay up as the first timing pair, so an experiment pays
        for process start-up once instead of twice. A crash kills every worker started here."""
        name = Role.CANDIDATE.label
        adopt_and_fill_first_cache(self, cases, clock)
        worker = self.warm.fork(Role.CANDIDATE) or \
            self.launcher.worker(name, self.candidate_root, self.run.worker_log(name, "quality")).spawn()
        best = self._spawn_best()
        metrics.prefetch()  # torchmetrics' import while the workers start and the corpus runs, not before
        if self.session.lane.is_cuda:
            self._spawn_forks()  # a GPU host's spare cores take their imports beside the candidate's start
        try:
            return self._quality_run(worker, best, cases, clock, live)
        except CandidateCrash:
            for w in (worker, best):
                if w is not None:
                    w.kill()
            self.close_forks()
            raise

    def _quality_run(self, worker: WorkerProcess, best: WorkerProcess | None, cases: list[Case], clock: PhaseClock,
                     live: Live | None) -> CandidateRun:
        lane = self.session.lane
        t = time.perf_counter()
        if live is not None:
            live.phase("quality: starting the candidate's worker" + (" (and the best's)" if best else ""))
        with ThreadPoolExecutor(1) as pool:
            best_boot = pool.submit(boot, best, self.spec(self.best_root)) if best else None
            worker.handshake()
            if self.forks is None:  # a CPU lane: after the candidate's start (cold preludes on few cores slow it)
                self._spawn_forks()
            t_build = time.perf_counter()
            build = worker.request("build", spec=self.spec(self.candidate_root))
            build_s = time.perf_counter() - t_build  # the harness's clock, not the worker's figure
            t = clock.spent("quality_worker_start", t)
            outputs = generate_corpus(worker, cases, lane.batch, self.key, lane.resolution,
                                      desc="quality: candidate corpus", live=live, gaps=quality_gaps(self.session))
            self.cold_start_s, self.cand_peak_mb = note_quality_worker(worker, build_s + outputs.first_s, lane.is_cuda)
            worker.write_back_cache()  # the tree's first worker: what it compiled, for the tree's later workers
            audit = audit_evidence(worker, build, outputs, cases, lane.batch, self.key)
            t = clock.spent("quality_corpus", t)
            best_build = best_boot.result() if best_boot else None
            clock.spent("best_worker_start_not_overlapped", t)
        if best is not None and best_build is not None:
            history = warm_history(self.session, outputs)
            self.warmup_reused = len(history)
            self.first_pair = Pair(worker, best, Sides(build_s, best_build), fresh=False, history=Sides(history, []))
        else:
            worker.close()
        return CandidateRun(build_s, outputs, audit)

    def plan(self, prompts: tuple[str, ...], roofline_ms: float | None, check: RoundCheck,
             bound: OffsetBound, collect: RoundCollector | None = None) -> MeasurementPlan:
        """The timed comparison of these two trees: the lane's protocol, the peaks and start seen so far, and who
        receives the timed outputs (`collect`: loop/quality/timed.py)."""
        assert self.best_root is not None
        lane = self.session.lane
        return MeasurementPlan(
            cand=Side(Role.CANDIDATE.label, self.candidate_root, self.spec(self.candidate_root)),
            best=Side(Role.BEST.label, self.best_root, self.spec(self.best_root)),
            protocol=lane.performance, prompts=prompts, batch=lane.batch, metric=lane.primary_metric,
            guardrails=lane.guardrails, is_cuda=lane.is_cuda, log_dir=self.run.dir, roofline_ms=roofline_ms,
            resolution=lane.resolution, check=check, memory=self.memory if lane.is_cuda else None,
            known_peaks_mb=Sides(self.cand_peak_mb, self.best_peak_mb()),
            cold_start_s=self.cold_start_s, bound=bound, collect=collect)

    def measure(self, plan: MeasurementPlan, progress: TimingProgress | None, clock: PhaseClock) -> PerfRecord:
        """Time the plan on the first pair (if kept up) and the fork servers; they are closed afterwards."""
        try:
            on_round, on_look = (progress.on_round, progress.on_look) if progress else (None, None)
            untimed_quality_pair(self, plan)
            perf = measure(plan, self.launcher, first_pair=self.first_pair, on_round=on_round, on_look=on_look,
                           forks=self.forks)
            self.first_pair = None  # measure() closed it
            return perf
        finally:
            t = time.perf_counter()
            self.close_forks()
            clock.spent("timing_fork_servers_close", t)

    def best_peak_mb(self) -> float | None:
        """The largest device memory a worker of the best's tree was seen to use (the harness's record)."""
        caches = self.launcher.caches
        if self.best_root is None or caches is None or not self.session.lane.is_cuda:
            return None
        return caches.record(self.launcher.tree_digest(self.best_root)).peak_gpu_mb

    def protect_best_cache(self) -> None:
        """Keep the best's compile cache while this run lasts; it seeds a new tree's (call once synced)."""
        caches = self.launcher.caches
        if caches is not None and self.best_root is not None:
            caches.hold_best(self.launcher.tree_digest(self.best_root), seed=self.session.lane.performance.reuse)

    def refuse_unless_best_fits(self) -> None:
        """Refuse (one line) when one worker of the best, as measured before, cannot fit the lane's budget."""
        layout = memory_plan.layout(self.memory, None, self.best_peak_mb())
        if layout.mode == "refuse":
            raise Refused(layout.reason)

    def _spawn_best(self) -> WorkerProcess | None:
        if self.best_root is None or not self.prefetch_best:
            return None
        if not memory_plan.may_prefetch(self.memory, self.best_peak_mb()):
            return None  # two workers of the best's size do not fit the card: the best boots when timed
        name = Role.BEST.label
        return self.warm.fork(Role.BEST) or \
            self.launcher.worker(name, self.best_root, self.run.worker_log(name, "block0")).spawn()

    def _spawn_forks(self) -> None:
        """Start both sides' fork servers (their imports run beside the quality run, never beside timed
        rounds): the pairs after the first are forked from them (lane setting performance.fork_server)."""
        p = self.session.lane.performance
        if self.best_root is None or not self.prefetch_best or not p.fork_server:
            return
        self.forks = self.warm.timing()  # pre-started by the last experiment's keeper (CUDA lanes)
        if self.forks is not None:
            return
        self.forks = ForkServers(self.launcher, self.candidate_root, self.best_root, self.run.dir,
                                 p.fork_servers(self.session.lane.is_cuda)).spawn()

    def close_forks(self) -> None:
        """Close both sides' fork servers, the adopted warm ones included (adopted timing servers once, there)."""
        if self.forks is not None and self.forks is not self.warm.timing():
            self.forks.close()
        self.forks = None
        self.warm.close()

    def close(self) -> None:
        """Stop workers that are still up (a discard before timing leaves the first pair unused)."""
        if self.first_pair is not None:
            self.first_pair.close()
            self.first_pair = None
        self.close_forks()


def adopt_and_fill_first_cache(w: CandidateWorkers, cases: list[Case], clock: PhaseClock) -> None:
    """Adopt the warm servers (the first worker's too when the candidate's tree is new: decided before any server
    opens its cache folder), then run the tree's first worker; a crash there closes every server adopted."""
    cold = w.launcher.sandbox is not None and first_worker.cache_is_cold(w.launcher, w.candidate_root)
    w.warm.adopt(w.session, w.launcher, (w.candidate_root, w.best_root), w.run.dir, w.prefetch_best, clock,
                 first=cold)
    try:
        clock.spent("first_worker", fill_first_cache(w, cases, cold))
    except CandidateCrash:
        w.close_forks()
        raise


def fill_first_cache(w: CandidateWorkers, cases: list[Case], cold: bool) -> float:
    """Before the quality run, a new candidate tree's cache is filled by a worker neither judged nor timed
    (loop/workers/first_worker.py; unsandboxed workers write the tree's folder themselves, hidden or not), forked
    from a warm server of its own when the experiment adopted them; returns when it started (for the phase clock)."""
    t, lane, name = time.perf_counter(), w.session.lane, Role.CANDIDATE.label
    if w.launcher.sandbox is not None:
        try:
            first_worker.fill_cache(w.launcher, name, w.candidate_root, w.spec(w.candidate_root),
                                    tuple(c.prompt for c in cases), lane.batch, lane.resolution,
                                    w.run.worker_log(name, "first"), forked=w.warm.first_worker, cold=cold)
        finally:
            w.warm.close_first()  # its cache copy becomes the tree's folder before the quality worker's first fork
    return t


def untimed_quality_pair(workers: CandidateWorkers, plan: MeasurementPlan) -> None:
    """Close the quality run's pair unless the lane times it (`performance.time_quality_pair`): its candidate
    worker has generated the corpus, the audit and the further cases, which a fresh pair has not."""
    if workers.first_pair is not None and not plan.protocol.times_quality_pair(plan.is_cuda):
        workers.first_pair.close()
        workers.first_pair, workers.warmup_reused = None, 0


@contextlib.contextmanager
def further_inputs(workers: CandidateWorkers, corpus: list[Case], live: Live | None,
                   needed: bool = True) -> Iterator[TaskInputs | None]:
    """The task-score tests' inputs while the assessment runs (None when not `needed`: a reused judging). The
    further outputs come from the first timing pair's workers while they are up, else from workers started for
    them: the candidate's tree, and the best's (the parent) when there is one."""
    if not needed:
        yield None
        return
    w, pair = workers, workers.first_pair
    cand = cases.OutputSource(w.session, w.launcher, "candidate", w.candidate_root, w.spec(w.candidate_root),
                              w.run.worker_log("candidate", "cases"), pair.cand if pair else None, candidate=True)
    parent = None if w.best_root is None else cases.OutputSource(
        w.session, w.launcher, "best", w.best_root, w.spec(w.best_root), w.run.worker_log("best", "cases"),
        pair.best if pair else None)
    try:
        yield cases.task_inputs(w.session, corpus, cand, parent, live)
    finally:
        for source in (cand, parent):
            if source is not None:
                source.close()
