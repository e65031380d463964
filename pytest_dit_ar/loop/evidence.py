"""Evidence about one candidate tree: its outputs on the frozen corpus, their quality against the original
baseline and its speed against the best. Each part is computed once, on first request, from worker
processes; what has been computed is exposed read-only (`quality_result`, `performance_result`, `crash`).

Used by the quality and perf tests both inside an experiment and in plain `pytest -m quality|perf` runs.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import quality_suite
from dit_ar_contract.classes import MILDEST
from dit_ar_contract.config import WorkloadSpec
from dit_ar_contract.errors import CandidateCrash, Refused
from perf_suite.roofline import floor_ms
from quality_suite import diff_images, gates, task_metrics
from quality_suite.artifacts import load_cases
from quality_suite.assessment import BaselineReference, Outputs, QualityAssessment, assess
from quality_suite.audit import AuditEvidence
from quality_suite.corpora import Case, load_corpus
from quality_suite.metrics import fidelity_batch

from ..state import gitops
from ..state.baseline import BaselineSummary, cases_dir
from ..state.files import write_record
from ..state.noise import read_noise, record_spread
from ..state.paths import STATE_DIR
from ..state.runs import RunPaths
from ..state.session import Session
from ..worker import sandbox
from ..worker.client import Generated, SandboxPolicy, WorkerLauncher, WorkerProcess
from ..worker.compile_cache import CompileCaches
from ..worker.forkserver import ForkServers
from . import memory_plan
from .generation import CorpusOutputs, audit_evidence, generate_corpus
from .live import Live
from .measurement import MeasurementPlan, Pair, PerfOutcome, RoundCheck, Side, boot, measure
from .progress import TimingProgress


def sandbox_policy(session: Session) -> SandboxPolicy:
    """What every sandbox of the session hides: git, the state, the project's own copy of the mutable paths
    (a side sees only its own tree, at the same path as the other side) and the frozen corpora."""
    root = session.root
    hide = [root / ".git", root / STATE_DIR, *(root / m.rstrip("/") for m in session.config.mutable_paths)]
    hide += gitops.private_paths(root)  # sessions side by side: other worktrees' state and the shared git folder
    hide += [(root / corpus).parent for lane in session.config.lanes.values()
             for corpus in (lane.corpus, lane.holdout_corpus) if corpus]  # the holdout, like the corpus
    hide.append(Path(quality_suite.__file__).resolve().parent / "corpus")
    weights = session.lane.weights_path(root)  # a pipeline folder outside the project (under /tmp, say)
    expose = (root.resolve(), *([Path(weights)] if weights else []))
    return SandboxPolicy(tuple(dict.fromkeys(p.resolve() for p in hide)), session.lane.is_cuda, expose,
                         session.config.mutable_paths)


def launcher_for(session: Session, sandboxed: bool = True) -> WorkerLauncher:
    """The workers of a session's lane: its device, threads, round timeout and (unless opted out) sandbox."""
    p = session.lane.performance
    policy = None
    if sandboxed:
        problem = sandbox_problem()
        if problem:
            raise Refused(f"the workers cannot be sandboxed here: {problem}")
        policy = sandbox_policy(session)
    caches = CompileCaches(session.paths.compile_cache, p.compile_cache_gb, p.compile_cache_keep)
    return WorkerLauncher(session.target, p.threads, p.round_timeout_s, policy, caches, session.config.mutable_paths)


def memory_budget(session: Session) -> memory_plan.MemoryBudget:
    """What the lane's live workers may hold together: the emulated card, the target's, or this device's."""
    lane, target = session.lane, session.target
    return memory_plan.budget(lane.is_cuda, session.config.target.vram_gb, target.on_target,
                              lane.guardrails.emulated_vram_gb, target.identity.memory_gb or None)


@lru_cache(maxsize=1)
def sandbox_problem() -> str | None:
    return sandbox.available()


@dataclass(frozen=True)
class CandidateRun:
    """What the quality run of the candidate produced."""

    build_s: float
    outputs: CorpusOutputs
    evidence: AuditEvidence


class Evidence:
    """Lazily computed, read-only evidence about the tree at `session.root` (the candidate)."""

    def __init__(self, session: Session, declared_class: str, run_dir: Path, best_root: Path | None = None,
                 prefetch_best: bool = False, candidate_root: Path | None = None, sandboxed: bool = True,
                 case_ids: set[str] | None = None):
        self.session, self.declared_class, self.run_dir = session, declared_class, run_dir
        self.run = RunPaths(run_dir)
        self.best_root = best_root
        self.candidate_root = candidate_root or session.root  # a clean checkout of HEAD in experiments
        self.prefetch_best = prefetch_best  # boot the best side during the quality run (experiments time it next)
        self.sandboxed = sandboxed
        self.launcher = launcher_for(session, sandboxed)
        self.key = session.record.seed_key if session.record else ""
        self.case_ids = case_ids  # plain runs of a few cases generate only those
        self.progress: TimingProgress | None = None  # set by the face that shows it
        self.live: Live | None = None  # the phases as they happen (set by the face that shows them)
        self._crash: CandidateCrash | None = None
        self._run: CandidateRun | None = None
        self._quality: QualityAssessment | None = None
        self._perf: PerfOutcome | None = None
        self._baseline: BaselineSummary | None = None
        self._first_pair: Pair | None = None
        self._forks: ForkServers | None = None  # both sides' fork servers, started beside the quality run
        self._seconds: dict[str, float] = {}
        self.memory = memory_budget(session)
        self._cand_peak_mb: float | None = None  # the quality worker's device memory (NVML)
        self._cold_start_s: float | None = None  # the candidate tree's first worker: build + first generate

    @property
    def seconds(self) -> dict[str, float]:
        """Where the evidence's wall time went, by phase (worker start, corpus, metrics, timing parts)."""
        return dict(self._seconds)

    def _spent(self, phase: str, since: float) -> float:
        now = time.perf_counter()
        self._seconds[phase] = self._seconds.get(phase, 0.0) + now - since
        return now

    # -- read-only results --------------------------------------------------------------------
    @property
    def crash(self) -> CandidateCrash | None:
        return self._crash

    @property
    def quality_result(self) -> QualityAssessment | None:
        return self._quality

    @property
    def performance_result(self) -> PerfOutcome | None:
        return self._perf

    @property
    def effective_class(self) -> str:
        return self._quality.effective_class if self._quality else self.declared_class

    # -- inputs ---------------------------------------------------------------------------------
    def cases(self) -> list[Case]:
        cases = load_corpus(self.session.root / self.session.lane.corpus)
        return [c for c in cases if self.case_ids is None or c.id in self.case_ids]

    def baseline_cases(self, cases: list[Case]) -> tuple[dict, dict]:
        """The verified baseline's images and latents of `cases`."""
        self.baseline()
        return load_cases(cases_dir(self.session.baseline_dir), cases)

    def baseline(self) -> BaselineSummary:
        if self._baseline is None:
            self._baseline = self.session.verified_baseline()
        return self._baseline

    # -- crash bookkeeping ----------------------------------------------------------------------
    def record_crash(self, exc: CandidateCrash) -> None:
        """Remember a crash wherever it happened (the verdict is CRASH) and write crash.txt."""
        if self._crash is None:
            self._crash = exc
            self.run.write_crash(str(exc), exc.details)

    def _raise_if_crashed(self) -> None:
        if self._crash is not None:
            raise self._crash

    # -- the candidate's quality run --------------------------------------------------------------
    def candidate(self) -> CandidateRun:
        """Build and run the candidate's pipeline on the corpus in a worker (once).

        While the candidate generates the corpus, the best side's worker boots, and both stay up as the
        first timing pair, so an experiment pays for process start-up once instead of twice."""
        self._raise_if_crashed()
        if self._run is None:
            worker = self.launcher.worker("candidate", self.candidate_root,
                                          self.run.worker_log("candidate", "quality")).spawn()
            best = self._spawn_best()
            self._spawn_forks()
            try:
                self._run = self._quality_run(worker, best)
            except CandidateCrash as exc:
                for w in (worker, best):
                    if w is not None:
                        w.kill()
                self._close_forks()
                self.record_crash(exc)
                raise
        return self._run

    def _quality_run(self, worker: WorkerProcess, best: WorkerProcess | None) -> CandidateRun:
        session = self.session
        t = time.perf_counter()
        lane, cases = session.lane, self.cases()
        self._phase("quality: starting the candidate's worker" + (" (and the best's)" if best else ""))
        with ThreadPoolExecutor(1) as pool:
            best_boot = pool.submit(boot, best, self.spec(self.best_root)) if best else None
            worker.handshake()
            t_build = time.perf_counter()
            build = worker.request("build", spec=self.spec(self.candidate_root))
            build_s = time.perf_counter() - t_build  # the harness's clock, not the worker's figure
            t = self._spent("quality_worker_start", t)
            outputs = generate_corpus(worker, cases, lane.batch, self.key, lane.resolution,
                                      desc="quality: candidate corpus", live=self.live)
            self._note_quality_worker(worker, build_s + outputs.first_s)
            audit = audit_evidence(worker, build, outputs, cases, lane.batch, self.key)
            t = self._spent("quality_corpus", t)
            best_build = best_boot.result() if best_boot else None
            self._spent("best_worker_start_not_overlapped", t)
        if best is not None and best_build is not None:
            self._first_pair = Pair(worker, best, {"cand": build_s, "best": best_build}, fresh=False)
        else:
            worker.close()
        return CandidateRun(build_s, outputs, audit)

    def _note_quality_worker(self, worker: WorkerProcess, start_s: float) -> None:
        """The quality worker's start (build + first generate: where a compile happens) and device memory."""
        worker.note_start(start_s)
        if worker.cache_warm is False:
            self._cold_start_s = start_s
        elif worker.caches is not None and worker.cache_digest is not None:
            self._cold_start_s = worker.caches.record(worker.cache_digest).cold_start_s
        if self.session.lane.is_cuda:
            self._cand_peak_mb = worker.gpu_memory_mb()
            worker.note_peak(self._cand_peak_mb)

    def best_peak_mb(self) -> float | None:
        """The largest device memory a worker of the best's tree was seen to use (the harness's record)."""
        caches = self.launcher.caches
        if self.best_root is None or caches is None or not self.session.lane.is_cuda:
            return None
        return caches.record(self.launcher.tree_digest(self.best_root)).peak_gpu_mb

    def protect_best_cache(self) -> None:
        """The best's compile cache is never evicted while this run lasts (call once the best worktree is synced)."""
        caches = self.launcher.caches
        if caches is not None and self.best_root is not None:
            caches.in_use.add(self.launcher.tree_digest(self.best_root))

    def refuse_unless_best_fits(self) -> None:
        """Refuse (one line) when one worker of the best, as measured before, cannot fit the lane's budget."""
        layout = memory_plan.layout(self.memory, None, self.best_peak_mb())
        if layout.mode == "refuse":
            raise Refused(layout.reason)

    def _phase(self, text: str) -> None:
        if self.live is not None:
            self.live.phase(text)

    def spec(self, side_root: Path) -> WorkloadSpec:
        """The workload for a side's worker: the path the worker sees its tree at, weights from the project."""
        return self.session.lane.workload(self.launcher.model_root(side_root), self.session.root)

    def _spawn_best(self) -> WorkerProcess | None:
        if self.best_root is None or not self.prefetch_best:
            return None
        if not memory_plan.may_prefetch(self.memory, self.best_peak_mb()):
            return None  # two workers of the best's size do not fit the card: the best boots when timed
        return self.launcher.worker("best", self.best_root, self.run.worker_log("best", "block0")).spawn()

    def _spawn_forks(self) -> None:
        """Start both sides' fork servers (their imports run beside the quality run, never beside timed
        rounds): the pairs after the first are forked from them (lane setting performance.fork_server)."""
        p = self.session.lane.performance
        if self.best_root is None or not self.prefetch_best or not p.fork_server:
            return
        self._forks = ForkServers(self.launcher, self.candidate_root, self.best_root, self.run_dir,
                                  p.fork_servers(self.session.lane.is_cuda)).spawn()

    def _close_forks(self) -> None:
        if self._forks is not None:
            self._forks.close()
            self._forks = None

    def close(self) -> None:
        """Stop workers that are still up (a discard before timing leaves the first pair unused)."""
        if self._first_pair is not None:
            self._first_pair.close()
            self._first_pair = None
        self._close_forks()

    # -- quality --------------------------------------------------------------------------------
    def quality(self) -> QualityAssessment:
        if self._quality is None:
            self._quality = self._assess()
            write_record(self.run.quality, self._quality.as_dict())
        return self._quality

    def _reference(self, cases: list[Case]) -> BaselineReference:
        base = self.baseline()
        images, latents = load_cases(cases_dir(self.session.baseline_dir), cases)
        return BaselineReference(Outputs(images, latents, AuditEvidence.from_dict(base.evidence)), base.envelope,
                                 base.task_metrics, base.task_case_pass, base.task_envelope)

    def _assess(self) -> QualityAssessment:
        cases = self.cases()
        reference = self._reference(cases)
        run = self.candidate()
        self._phase("quality: metrics and gates against the baseline")
        t = time.perf_counter()
        best = self.session.best()
        lane = self.session.lane
        result = assess(self.declared_class, best.effective_class if best else MILDEST,
                        Outputs(run.outputs.images, run.outputs.latents, run.evidence), reference, cases,
                        lane.quality, lane.task_metrics, self.session.root, whole_corpus=self.case_ids is None)
        diff_images.write(self.run.worst_cases, self.run.cases, run.outputs.images, reference.outputs.images,
                          result.fidelity)
        failing = [cid for cid, case in result.per_case.items() if any(not c.passed for c in case.checks)]
        diff_images.case_diffs(run.outputs.images, reference.outputs.images, result.fidelity, failing,
                               self.run.diffs)
        self._spent("quality_metrics", t)
        return result

    def check_metrics_available(self) -> None:
        """Refuse before anything runs when a required metric cannot be computed here."""
        task_metrics.check_available(self.session.lane.task_metrics, self.session.lane.quality, self.session.root)

    # -- performance ----------------------------------------------------------------------------
    def performance(self) -> PerfOutcome:
        """Interleaved A/B timing of the candidate against the best worktree (after the quality run: the
        timed outputs are checked under the class the quality run found)."""
        self._raise_if_crashed()
        if self._perf is None:
            if self.best_root is None:
                raise RuntimeError("no best worktree to compare with")
            self.quality()
            self._phase("speed: the candidate against the best in fresh worker pairs, interleaved rounds")
            try:
                on_round = self.progress.on_round if self.progress else None
                on_look = self.progress.on_look if self.progress else None
                self._perf = measure(self._plan(), self.launcher, first_pair=self._first_pair, on_round=on_round,
                                     on_look=on_look, forks=self._forks)
                self._first_pair = None  # measure() closed it
            except CandidateCrash as exc:
                self.record_crash(exc)
                raise
            finally:
                t = time.perf_counter()
                self._close_forks()
                self._spent("timing_fork_servers_close", t)
            for phase, spent in self._perf.seconds.items():
                self._seconds[f"timing_{phase}"] = spent
            write_record(self.run.perf, self._perf.as_dict())
            self._learn_noise(self._perf)
        return self._perf

    def _best_commit(self) -> str | None:
        best = self.session.best()
        return best.commit if best else None

    def _offset_bound(self):
        """B for this experiment: the session's noise state against the current best (state.noise)."""
        lane = self.session.lane
        noise = read_noise(self.session.paths, self.session.lane_id).against(self._best_commit())
        return noise.bound(lane.performance, lane.device)

    def _learn_noise(self, perf: PerfOutcome) -> None:
        """Pool this experiment's between-pair spread against the same best (a faithful timing only)."""
        if perf.spread is not None and not perf.unfaithful and self.session.record is not None:
            record_spread(self.session.paths, self.session.lane_id, self._best_commit(), self.run_dir.name,
                          perf.spread)

    def _plan(self) -> MeasurementPlan:
        assert self.best_root is not None
        lane = self.session.lane
        return MeasurementPlan(
            cand=Side("candidate", self.candidate_root, self.spec(self.candidate_root)),
            best=Side("best", self.best_root, self.spec(self.best_root)),
            protocol=lane.performance, prompts=tuple(c.prompt for c in self.cases()), batch=lane.batch,
            metric=lane.primary_metric, guardrails=lane.guardrails, is_cuda=lane.is_cuda, log_dir=self.run_dir,
            roofline_ms=self.roofline_ms(), resolution=lane.resolution, check=self._round_check(),
            memory=self.memory if lane.is_cuda else None,
            known_peaks_mb={"cand": self._cand_peak_mb, "best": self.best_peak_mb()},
            cold_start_s=self._cold_start_s, bound=self._offset_bound())

    def _round_check(self) -> RoundCheck:
        """Candidate vs best outputs of the same timed requests under the effective class's per-case gate (with
        the quality gate's floors: the same `approximate_outputs` rule)."""
        quality = self.quality()
        cls = quality.effective_class
        envelope = self.baseline().envelope
        approx = quality.approximate_outputs
        contract = self.session.lane.quality

        def check(cand: Generated, best: Generated) -> list[str]:
            failures = []
            n = len(cand.images)
            fids = fidelity_batch([cand.images[i] for i in range(n)], [best.images[i] for i in range(n)],
                                  [cand.latents[i] for i in range(n)], [best.latents[i] for i in range(n)])
            for i, fid in enumerate(fids):
                checks = gates.case_checks(cls, f"timed-{i}", fid, contract, envelope, approximate_outputs=approx)
                failures += [c.describe() for c in checks if not c.passed]
            return [f"timed outputs against the best's for the same request: {f}" for f in failures[:3]]

        return check

    def roofline_ms(self) -> float | None:
        """The fastest a batch could possibly run on this device, from the baseline's FLOP count and peak
        (scaled by the candidate's denoiser rows when its quality run measured them; the peak is every GPU
        the worker holds)."""
        baseline = self.baseline()
        roof = baseline.roofline
        base_rows = roof.flops_rows_per_image or AuditEvidence.from_dict(baseline.evidence).denoiser_rows_per_image
        cand_rows = self._run.outputs.denoiser_rows_per_image if self._run else None
        peak = roof.device_peak_tflops * self.session.lane.gpus if roof.device_peak_tflops else roof.device_peak_tflops
        return floor_ms(roof.flops_per_batch, peak, bool(roof.device_peak.get("measured")),
                        base_rows, cand_rows, self.effective_class)
