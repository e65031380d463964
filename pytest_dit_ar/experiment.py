"""One experiment's git and state side: pre-run guards, post-run guards, verdict, ledger, keep or reset.

Verdict rules, in order (DESIGN §4): scope -> crash -> quality vs the original baseline ->
performance vs the current best. Refusals (exit 2) change nothing in git or state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import git
from filelock import FileLock, Timeout

from . import gitops, ledger
from .best import best_commit, record_best
from .context import Context, load_context, metric_value, new_run_id, verify_baseline, verify_session_integrity
from .errors import EXIT_DISCARD, EXIT_OK, Refused
from .hardware import same_device
from .state import write_json_atomic

STATUS_LINE = {"keep": "KEEP", "discard-quality": "DISCARD-QUALITY", "discard-performance": "DISCARD-PERFORMANCE",
               "discard-scope": "DISCARD-SCOPE", "crash": "CRASH"}


@dataclass
class Verdict:
    status: str
    reasons: list[str] = field(default_factory=list)

    @property
    def line(self) -> str:
        return f"VERDICT: {STATUS_LINE[self.status]}"

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.status == "keep" else EXIT_DISCARD


class Experiment:
    """Guards and bookkeeping around one candidate commit."""

    def __init__(self, config_path: Path, lane: str | None, classification: str, description: str):
        self.config_path, self.lane_name = config_path, lane
        self.classification, self.description = classification, description
        self.ctx: Context | None = None
        self.repo: git.Repo | None = None
        self.lock: FileLock | None = None
        self.commit = self.parent = ""
        self.run_id = ""
        self.run_dir: Path | None = None
        self.judgement: Any = None  # a judgement.Judgement once the guards passed
        self.verdict: Verdict | None = None
        self._ledger_bytes = b""
        self.started = time.time()

    # -- before the run -------------------------------------------------------------------
    def acquire(self) -> None:
        """One experiment per repo at a time: a second one is refused, never interleaved."""
        from .config import load_config
        from .state import StatePaths

        config = load_config(self.config_path)
        paths = StatePaths(config.root)
        paths.dir.mkdir(parents=True, exist_ok=True)
        self.lock = FileLock(str(paths.lock), timeout=0)
        try:
            self.lock.acquire()
        except Timeout:
            self.lock = None
            raise Refused(f"another experiment holds {paths.lock}: wait for it to finish "
                          "(one experiment per repository and GPU at a time)") from None

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def begin(self) -> Verdict | None:
        """Run every pre-run guard; refuse (raise Refused) or return a scope verdict, else None."""
        self.acquire()
        ctx = self.ctx = load_context(self.config_path, self.lane_name)
        if not same_device(ctx.session.get("device", {}), ctx.target.identity):
            raise Refused(f"the session's baseline device is {ctx.session.get('device', {}).get('name')!r}, "
                          f"this run would use {ctx.target.identity.get('name')!r}; start a new session")
        repo = self.repo = gitops.open_repo(ctx.root)
        gitops.require_branch(repo, ctx.session["tag"])
        gitops.require_clean(repo)
        best = best_commit(ctx)
        ref = gitops.read_ref(repo, gitops.best_ref(ctx.session["tag"], ctx.lane_id))
        if ref and ref != best:
            raise Refused(f"best.json names {best[:10]} but the best ref names {ref[:10]}; run `dit-ar status`")
        shape = gitops.candidate_commit(repo, best)
        self.commit, self.parent = shape.sha, shape.parent
        verify_baseline(ctx)
        from quality_suite import task_metrics  # heavy (torch): imported once the cheap refusals passed

        task_metrics.check_available(ctx.lane.task_metrics, ctx.lane, ctx.root)
        self.run_id = new_run_id(self.commit)
        self.run_dir = ctx.paths.run(self.run_id)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._ledger_bytes = ctx.paths.ledger.read_bytes() if ctx.paths.ledger.exists() else b""
        outside = gitops.out_of_scope(shape.changed, ctx.config.mutable_paths)
        if outside:
            return self.conclude(Verdict("discard-scope", [f"the commit changes paths outside "
                                                           f"{list(ctx.config.mutable_paths)}: {outside}"]))
        problems = verify_session_integrity(ctx)
        if problems:
            raise Refused("fixed files differ from integrity.json before the run: " + "; ".join(problems[:5]))
        gitops.sync_worktree(repo, ctx.paths.best_worktree, best)
        from .judgement import Judgement

        self.judgement = Judgement(ctx, self.classification, self.run_dir, ctx.paths.best_worktree,
                                   prefetch_best=True)
        return None

    # -- after the run --------------------------------------------------------------------
    def post_run_problems(self) -> list[str]:
        """What the candidate may have changed while it ran: fixed files, baseline, ledger, git."""
        ctx, repo = self.ctx, self.repo
        assert ctx is not None and repo is not None
        problems = verify_session_integrity(ctx)
        try:
            verify_baseline(ctx)
        except Refused as exc:
            problems.append(f"baseline: {exc}")
        current = ctx.paths.ledger.read_bytes() if ctx.paths.ledger.exists() else b""
        if current != self._ledger_bytes:
            problems.append("the ledger changed while the candidate ran (restored)")
            _restore_bytes(ctx.paths.ledger, self._ledger_bytes)
        if gitops.head_sha(repo) != self.commit or gitops.current_branch(repo) != gitops.branch_name(ctx.session["tag"]):
            problems.append("HEAD or the branch moved while the candidate ran")
        dirty = gitops.dirty_entries(repo)
        if dirty:
            problems.append(f"the candidate left changes in the tree: {dirty[:5]}")
        return problems

    def decide(self, outcomes: dict[str, list[str]]) -> Verdict:
        """Verdict from the post-run guards, the crash record and the tests' outcomes per marker."""
        problems = self.post_run_problems()
        if problems:
            return Verdict("discard-scope", problems)
        j = self.judgement
        if j is not None and j.crash is not None:
            return Verdict("crash", [str(j.crash)])
        q_failed = [n for n in outcomes.get("quality", {}) if outcomes["quality"][n] != "passed"]
        if not outcomes.get("quality"):
            return Verdict("discard-quality", ["no quality test ran"])
        if q_failed:
            reasons = [f.describe() for f in j.quality().failures()[:8]] if j and j._quality else []
            return Verdict("discard-quality", reasons or [f"quality tests failed: {q_failed[:5]}"])
        p_failed = [n for n in outcomes.get("perf", {}) if outcomes["perf"][n] != "passed"]
        if not outcomes.get("perf") or p_failed:
            reasons = j.performance().reasons if j and j._perf else [f"performance tests did not pass: {p_failed[:5]}"]
            return Verdict("discard-performance", reasons)
        return Verdict("keep", j.performance().reasons if j and j._perf else [])

    def conclude(self, verdict: Verdict) -> Verdict:
        """Write the run record and the ledger row, then keep (move best) or reset to the explicit parent."""
        ctx, repo = self.ctx, self.repo
        assert ctx is not None and repo is not None and self.run_dir is not None
        self.verdict = verdict
        row = self._ledger_row(verdict)
        write_json_atomic(self.run_dir / "experiment.json", {**row, "reasons": verdict.reasons,
                                                             "duration_s": time.time() - self.started})
        ledger.append(ctx.paths.ledger, row)
        if verdict.status == "keep":
            quality = self.judgement._quality if self.judgement else None
            record_best(ctx, repo, self.commit, self.run_id, self._measurements(),
                        quality.effective_class if quality else self.classification)
        else:
            gitops.reset_to(repo, self.parent, ctx.config.mutable_paths)
            _clean_fixed(repo, ctx.config.fixed_paths)
        return verdict

    def _measurements(self) -> dict[str, Any]:
        j = self.judgement
        stats = j.performance().final if j and j._perf else None
        return {"median_ms": stats.cand_median_ms, "p95_ms": stats.cand_p95_ms} if stats else {}

    def _ledger_row(self, verdict: Verdict) -> dict[str, Any]:
        ctx = self.ctx
        assert ctx is not None and self.run_dir is not None
        j = self.judgement
        quality = j._quality if j else None
        stats = j._perf.final if j and j._perf else None
        peak = None
        if j and j._perf and j._perf.blocks:
            from perf_suite.timing import peak_memory_mb

            peak = peak_memory_mb(j._perf.blocks[-1], "cand")
        best = ctx.best() or {}
        summary = quality.headline() if quality else "; ".join(verdict.reasons)[:300]
        return {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "run_id": self.run_id, "lane": ctx.lane_id,
            "commit": self.commit, "parent": self.parent, "status": verdict.status,
            "declared_class": self.classification,
            "effective_class": quality.effective_class if quality else "",
            "metric": ctx.lane.primary_metric,
            "best_before": metric_value(stats.best_median_ms if stats else
                                        (best.get("measurements") or {}).get("median_ms"), ctx.lane),
            "candidate": metric_value(stats.cand_median_ms if stats else None, ctx.lane),
            "improvement_pct": stats.improvement_pct if stats else None,
            "p_value": stats.p_value if stats else None, "peak_vram_mb": peak,
            "quality_summary": summary, "description": self.description,
            "run_dir": str(self.run_dir.relative_to(ctx.root)),
        }


def _restore_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".restore")
    tmp.write_bytes(data)
    tmp.replace(path)


def _clean_fixed(repo: git.Repo, fixed: tuple[str, ...]) -> None:
    """Remove untracked files a candidate created in fixed paths (the tree was clean before the run)."""
    existing = [f.rstrip("/") for f in fixed if (Path(repo.working_dir) / f.rstrip("/")).exists()]
    if existing:
        repo.git.clean("-fd", "--", *existing)

