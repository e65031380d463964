"""Evidence about the working tree's pipeline: its outputs against the baseline, and its speed.

Used by the quality and perf tests both inside an experiment and in plain `pytest -m quality|perf`
runs. Everything is computed lazily, once per pytest session, from worker processes.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perf_suite import timing
from quality_suite import audit, gates, perceptual, task_metrics
from quality_suite.artifacts import load_cases, per_case_fidelity
from quality_suite.corpora import Case, load_corpus
from quality_suite.evidence import write as write_evidence
from quality_suite.metrics import summarize

from .context import Context, verify_baseline
from .errors import CandidateCrash
from .generation import CorpusOutputs, evidence, generate_corpus
from .state import write_json_atomic
from .workers import WorkerProcess


@dataclass
class QualityResult:
    declared_class: str
    effective_class: str
    audit_reasons: list[str]
    per_case: dict[str, dict[str, Any]]
    aggregate: list[gates.Check]
    summary: dict[str, Any]
    task_candidate: dict[str, float]
    task_baseline: dict[str, float]
    lpips: str = "not measured"

    def case_checks(self, case_id: str) -> list[gates.Check]:
        return self.per_case[case_id]["checks"]

    def failures(self) -> list[gates.Check]:
        failed = [c for case in self.per_case.values() for c in case["checks"] if not c.passed]
        return failed + [c for c in self.aggregate if not c.passed]

    @property
    def passed(self) -> bool:
        return not self.failures()

    def headline(self) -> str:
        """One line for the ledger: the class, the worst fidelity and the task scores."""
        parts = [f"class={self.effective_class}"]
        for key in ("psnr_db", "ssim", "latent_rel_l2"):
            if key in self.summary:
                worst = self.summary[key]["worst"]
                parts.append(f"worst_{key}={'inf' if math.isinf(worst) else f'{worst:.4g}'}")
        parts += [f"{k}={v:.4g}" for k, v in self.task_candidate.items()]
        failed = self.failures()
        if failed:
            parts.append(f"FAILED {len(failed)} checks, first: {failed[0].describe()}")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "declared_class": self.declared_class, "effective_class": self.effective_class,
            "audit_reasons": self.audit_reasons, "summary": self.summary, "lpips": self.lpips,
            "task_candidate": self.task_candidate, "task_baseline": self.task_baseline,
            "aggregate": [c.as_dict() for c in self.aggregate],
            "per_case": {cid: {"fidelity": v["fidelity"], "task_pass": v.get("task_pass"),
                               "checks": [c.as_dict() for c in v["checks"]]} for cid, v in self.per_case.items()},
            "failures": [c.describe() for c in self.failures()],
        }


@dataclass
class Judgement:
    ctx: Context
    declared_class: str
    run_dir: Path
    best_root: Path | None = None
    prefetch_best: bool = False  # boot the best side during the quality run (experiments time it next)
    crash: CandidateCrash | None = None
    _candidate: tuple[dict, CorpusOutputs] | None = field(default=None, repr=False)
    _quality: QualityResult | None = field(default=None, repr=False)
    _perf: timing.PerfOutcome | None = field(default=None, repr=False)
    _baseline: dict[str, Any] | None = field(default=None, repr=False)
    _first_pair: timing.Pair | None = field(default=None, repr=False)

    # -- inputs ---------------------------------------------------------------------------
    def cases(self) -> list[Case]:
        return load_corpus(self.ctx.root / self.ctx.lane.corpus)

    def baseline(self) -> dict[str, Any]:
        if self._baseline is None:
            self._baseline = verify_baseline(self.ctx)
        return self._baseline

    def candidate(self) -> tuple[dict, CorpusOutputs]:
        """Build and run the working tree's pipeline on the corpus in a worker (once).

        While the candidate generates the corpus, the best side's worker boots, and both stay up as
        the first timing pair, so an experiment pays for process start-up once instead of twice."""
        if self.crash is not None:
            raise self.crash
        if self._candidate is None:
            ctx = self.ctx
            worker = WorkerProcess("candidate", ctx.root, ctx.target, ctx.threads,
                                   self.run_dir / "worker-candidate-quality.log",
                                   float(ctx.lane.performance["round_timeout_s"])).spawn()
            best = self._spawn_best()
            try:
                with ThreadPoolExecutor(1) as pool:
                    best_boot = pool.submit(self._boot, best, self.best_root) if best else None
                    build = worker.handshake().request("build", spec=ctx.lane.workload(ctx.root))
                    outputs = generate_corpus(worker, self.cases(), ctx.lane.batch, desc="candidate")
                    best_build = best_boot.result() if best_boot else None
                self._candidate = (build, outputs)
                if best is not None:
                    self._first_pair = timing.Pair(worker, best, {"cand": build["build_s"], "best": best_build})
                else:
                    worker.close()
            except CandidateCrash as exc:
                for w in (worker, best):
                    if w is not None:
                        w.kill()
                self.crash = exc
                self._write_crash(exc)
                raise
        return self._candidate

    def _spawn_best(self) -> WorkerProcess | None:
        if self.best_root is None or not self.prefetch_best:
            return None
        ctx = self.ctx
        return WorkerProcess("best", self.best_root, ctx.target, ctx.threads, self.run_dir / "worker-best-block0.log",
                             float(ctx.lane.performance["round_timeout_s"])).spawn()

    def _boot(self, worker: WorkerProcess, root: Path) -> float:
        return worker.handshake().request("build", spec=self.ctx.lane.workload(root))["build_s"]

    def close(self) -> None:
        """Stop workers that are still up (a discard before timing leaves the first pair unused)."""
        if self._first_pair is not None:
            self._first_pair.close()
            self._first_pair = None

    def _write_crash(self, exc: CandidateCrash) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "crash.txt").write_text(f"{exc}\n\n{exc.details}\n", encoding="utf-8")

    # -- quality ----------------------------------------------------------------------------
    def quality(self) -> QualityResult:
        if self._quality is None:
            self._quality = self._evaluate_quality()
            write_json_atomic(self.run_dir / "quality.json", self._quality.as_dict())
        return self._quality

    def _evaluate_quality(self) -> QualityResult:
        base = self.baseline()
        cases = self.cases()
        build, outputs = self.candidate()
        cand_evidence = evidence(build, outputs)
        inherited = (self.ctx.best() or {}).get("effective_class", "exact")
        effective, reasons = audit.effective_class(self.declared_class, cand_evidence, base["evidence"], inherited)
        approx = audit.approximate_outputs(self.declared_class, cand_evidence, base["evidence"], inherited)
        base_images, base_latents = load_cases(self.ctx.baseline_dir / "cases", cases)
        quality_cfg = self.ctx.lane.quality
        fid = per_case_fidelity(outputs.images, outputs.latents, base_images, base_latents)
        lpips_values, lpips_status = perceptual.evaluate(outputs.images, base_images, quality_cfg)
        for cid, value in (lpips_values or {}).items():
            fid[cid]["lpips"] = value
        scores = task_metrics.compute(self.ctx.lane.task_metrics, outputs.images, cases, self.ctx.root, quality_cfg)
        cand_pass = task_metrics.case_passes(scores)
        base_pass = base.get("task_case_pass", {})
        per_case = {}
        for case in cases:
            checks = gates.case_checks(effective, case.id, fid[case.id], quality_cfg, base["envelope"],
                                       base_pass.get(case.id), cand_pass.get(case.id), approx)
            per_case[case.id] = {"fidelity": fid[case.id], "checks": checks, "task_pass": cand_pass.get(case.id)}
        summary = summarize(fid)
        task_cand = {k: v.value for k, v in scores.items()}
        aggregate = gates.aggregate_checks(effective, summary, quality_cfg, task_cand, base.get("task_metrics", {}),
                                           task_metrics.lower_is_better(), approx)
        write_evidence(self.run_dir, outputs.images, base_images, fid)
        return QualityResult(self.declared_class, effective, reasons, per_case, aggregate, summary,
                             task_cand, base.get("task_metrics", {}), lpips_status)

    # -- performance ------------------------------------------------------------------------
    def performance(self) -> timing.PerfOutcome:
        """Interleaved A/B timing of the working tree against the best worktree."""
        if self.crash is not None:
            raise self.crash
        if self._perf is None:
            if self.best_root is None:
                raise RuntimeError("no best worktree to compare with")
            ctx = self.ctx
            spec = ctx.lane.workload(ctx.root)
            best_spec = ctx.lane.workload(self.best_root)
            try:
                self._perf = timing.measure(
                    timing.SideSpec("candidate", ctx.root, spec), timing.SideSpec("best", self.best_root, best_spec),
                    ctx.target, ctx.lane.performance, [c.prompt for c in self.cases()], ctx.lane.batch,
                    ctx.lane.primary_metric, ctx.lane.guardrails, ctx.lane.is_cuda, self.run_dir,
                    roofline_ms=self.roofline_ms(), first_pair=self._first_pair)
                self._first_pair = None  # measure() closed it
            except CandidateCrash as exc:
                self.crash = exc
                self._write_crash(exc)
                raise
            write_json_atomic(self.run_dir / "perf.json", self._perf.as_dict())
        return self._perf

    def roofline_ms(self) -> float | None:
        """The fastest a batch could possibly run on this device, from the baseline's FLOP count and peak
        (scaled by the candidate's denoiser rows when its quality run measured them)."""
        from perf_suite.roofline import floor_ms

        rows = self._candidate[1].denoiser_rows_per_image if self._candidate else None
        cls = self._quality.effective_class if self._quality else self.declared_class
        return floor_ms(self.baseline(), rows, cls)

