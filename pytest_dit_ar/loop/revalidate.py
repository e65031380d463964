"""`dit-ar revalidate`: the current best against the lane's original baseline commit, measured again.

Each keep is judged against the best of its moment; the chain's cumulative speed-up is only the product of
the steps' estimates, and a chain of lucky keeps (a downward-biased running minimum) shows only when the whole
chain is timed again in fresh processes. This module does that: the best's tree against a clean checkout of the
original baseline commit (`.autoresearch/worktrees/origin`), in fresh worker pairs, segment by segment, with
the verdict's own statistics; and beside it the product of the kept steps' estimates, with the interval of the
sum of their log ratios. When the two 95% intervals do not overlap, `status`, the report and the summary warn.

It also judges the best on the lane's holdout corpus (loop/quality/holdout.py) and, when the best is approximate or
quantization against the original baseline, confirms it there on fresh seeds (loop/quality/confirmation.py;
`confirm_best` does the same alone for `dit-ar summary` and `dit-ar report`). It writes a run folder
(`revalidate.json`, `perf.json`, `confirmation.json`) and one ledger row of its own kind (`revalidate`), and never
moves the best: a confirmation that fails is information, never a reset. `dit-ar experiment` runs it after every
`revalidate_every` keeps (the lane's performance protocol, default 5).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dit_ar_contract import versions
from dit_ar_contract.config import Guardrails
from dit_ar_contract.errors import CandidateCrash, Refused
from dit_ar_contract.sides import Role
from dit_ar_contract.status import Status
from perf_suite.sequential import Look, improvement_pct
from quality_suite.corpora import load_corpus

from ..state import confirmation as confirmed
from ..state import gitops, ledger, runs
from ..state.best import require_best
from ..state.files import fields_from, read_json_object, write_json_atomic
from ..state.ledger import LedgerRow
from ..state.live import LiveFile
from ..state.noise import read_noise
from ..state.paths import new_run_id, now
from ..state.perf_record import PerfRecord
from ..state.roles import RoleCheck, read_roles
from ..state.session import INTEGRITY_WAY_OUT, Session, open_session, verify_integrity
from . import conclusion
from .guards import gpu_locks
from .quality import confirmation, holdout
from .speed import role_check
from .speed.measurement import measure
from .speed.measurement_plan import MeasurementPlan, Side
from .workers.launch import launcher_for

RECORD = runs.REVALIDATION_RECORD
Z95 = 1.959963984540054  # both intervals compared at the same two-sided 95% level


# -- the statistics: the one place that reads the verdict's look ----------------------------------------------
def cumulative_look(perf: Any) -> Look | None:
    """The verdict's own last look over every segment of the re-validation: `measure()` runs the experiments'
    sequential test (perf_suite.sequential) with the session's offset bound, so a better verdict engine changes
    both at once."""
    return perf.look


def log_ratio_of(pct: float, metric: str) -> float:
    """The mean log ratio (candidate/best latency) that an improvement of `pct` per cent means (the inverse of
    perf_suite.sequential.improvement_pct)."""
    if metric == "images_per_s":
        return -math.log1p(pct / 100.0)
    return math.log1p(-pct / 100.0)


@dataclass(frozen=True)
class Interval:
    """An improvement in per cent (positive = faster) with its 95% interval, and the log ratio behind it."""

    estimate_pct: float
    lower_pct: float
    upper_pct: float
    log_ratio: float
    standard_error: float | None  # of the log ratio; None: unknown (the interval is then the estimate alone)

    @classmethod
    def of(cls, log_ratio: float, standard_error: float | None, metric: str) -> Interval:
        se = standard_error if standard_error is not None and math.isfinite(standard_error) else None
        half = Z95 * se if se is not None else 0.0
        return cls(improvement_pct(log_ratio, metric), improvement_pct(log_ratio + half, metric),
                   improvement_pct(log_ratio - half, metric), log_ratio, se)

    @classmethod
    def from_look(cls, look: Look, metric: str) -> Interval:
        return cls.of(log_ratio_of(look.estimate_pct, metric), look.standard_error, metric)

    def overlaps(self, other: Interval) -> bool:
        return self.lower_pct <= other.upper_pct and other.lower_pct <= self.upper_pct

    def describe(self) -> str:
        if self.standard_error is None:
            return f"{self.estimate_pct:+.2f}% (no interval)"
        return f"{self.estimate_pct:+.2f}% [{self.lower_pct:+.2f}%, {self.upper_pct:+.2f}%]"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Interval:
        return cls(**{k: data[k] for k in ("estimate_pct", "lower_pct", "upper_pct", "log_ratio", "standard_error")})


@dataclass(frozen=True)
class Step:
    """One kept commit of the chain, with the estimate and standard error its verdict found."""

    run_id: str
    commit: str
    description: str
    effective_class: str
    estimate_pct: float
    standard_error: float | None


def chain_steps(session: Session, rows: list[LedgerRow], history: tuple[str, ...]) -> list[Step]:
    """The keeps that built the current best (its history), in order, each with its perf.json look."""
    steps = []
    for row in rows:
        if row.status is not Status.KEEP or row.lane != session.lane_id or row.commit not in history:
            continue
        perf = runs.read_perf(session.root / row.run_dir)
        look = perf.look if perf is not None else None
        estimate = row.improvement_pct if look is None or look.estimate_pct is None else look.estimate_pct
        if estimate is None:
            continue
        steps.append(Step(row.run_id, row.commit, row.description, row.effective_class, float(estimate),
                          look.standard_error if look is not None else None))
    return steps


def chain_product(steps: list[Step], metric: str) -> Interval | None:
    """The product of the steps' speed-ups (the sum of their log ratios) and its interval (their variances add;
    one step without a standard error leaves the product without an interval)."""
    if not steps:
        return None
    total = sum(log_ratio_of(s.estimate_pct, metric) for s in steps)
    errors = [s.standard_error for s in steps]
    se = math.sqrt(sum(e * e for e in errors)) if all(e is not None for e in errors) else None
    return Interval.of(total, se, metric)


@dataclass(frozen=True)
class Revalidation:
    """What `revalidate.json` holds."""

    run_id: str
    lane: str
    best_commit: str
    baseline_commit: str
    metric: str
    measured: Interval | None
    product: Interval | None
    steps: tuple[Step, ...]
    segments: int
    rounds: int
    holdout: holdout.HoldoutResult
    created: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()
    role_check: RoleCheck | None = None  # the best against itself, side-blind (loop/speed/role_check.py)
    confirmation: str = ""  # the best's confirmation on fresh seeds, in one line ("": nothing to confirm)

    @property
    def agree(self) -> bool | None:
        """Whether the measured cumulative speed-up and the product of the steps agree within their intervals
        (None: one of them is missing)."""
        if self.measured is None or self.product is None:
            return None
        return self.measured.overlaps(self.product)

    def warning(self) -> str | None:
        if self.agree is False:
            assert self.measured is not None and self.product is not None
            return (f"WARNING: the chain re-validated at {self.measured.describe()} against the original baseline, "
                    f"but the product of its {len(self.steps)} kept steps claims {self.product.describe()}: the "
                    "intervals do not overlap (lucky keeps?); inspect the steps with `dit-ar summary --markdown`")
        return None

    def headline(self) -> str:
        measured = self.measured.describe() if self.measured else "not measured"
        product = self.product.describe() if self.product else "no kept steps"
        agree = {True: "agree", False: "DISAGREE", None: "not compared"}[self.agree]
        roles = "; role-DEPENDENT" if self.role_check and self.role_check.role_dependent else \
            "; no role difference" if self.role_check else ""
        return (f"re-validated {self.best_commit[:10]} vs original baseline {self.baseline_commit[:10]}: "
                f"measured {measured}; product of {len(self.steps)} kept steps {product} ({agree}); "
                f"{self.holdout.headline()}{roles}"
                + (f"; confirmation: {self.confirmation}" if self.confirmation else ""))

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["holdout"] = {**self.holdout.as_dict(), "headline": self.holdout.headline()}
        d["agree"] = self.agree
        d["headline"] = self.headline()
        d["warning"] = self.warning()
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Revalidation:
        def interval(key: str) -> Interval | None:
            return Interval.from_dict(data[key]) if data.get(key) else None

        check = data.get("role_check")
        return cls(data["run_id"], data["lane"], data["best_commit"], data["baseline_commit"], data["metric"],
                   interval("measured"), interval("product"), tuple(Step(**s) for s in data.get("steps") or ()),
                   int(data.get("segments", 0)), int(data.get("rounds", 0)),
                   holdout.HoldoutResult.from_dict(data.get("holdout") or {}), data.get("created", ""),
                   dict(data.get("seconds") or {}), tuple(data.get("reasons") or ()),
                   fields_from(RoleCheck, check) if isinstance(check, dict) else None,
                   str(data.get("confirmation") or ""))


def latest(session: Session) -> Revalidation | None:
    """The lane's last re-validation (from its ledger row's run folder), None when there is none."""
    rows = [r for r in ledger.read(session.paths.ledger) if r.lane == session.lane_id]
    return latest_of(session.root, rows)


def latest_of(root: Path, rows: list[LedgerRow]) -> Revalidation | None:
    for row in reversed(rows):
        if row.status is Status.REVALIDATE:
            data = read_json_object(root / row.run_dir / RECORD)
            try:
                return Revalidation.from_dict(data) if data else None
            except (KeyError, TypeError, ValueError):
                return None
    return None


def keeps_since_revalidation(rows: list[LedgerRow], lane_id: str) -> int:
    """Keeps of the lane after its last re-validation (or its baseline)."""
    count = 0
    for row in rows:
        if row.lane != lane_id:
            continue
        if row.status in (Status.REVALIDATE, Status.BASELINE):
            count = 0
        elif row.status is Status.KEEP:
            count += 1
    return count


def due(config_path: Path, lane: str | None = None) -> bool:
    """Whether `experiment` should re-validate now: `revalidate_every` keeps since the last one."""
    session = open_session(config_path, lane)
    every = session.lane.performance.revalidate_every
    rows = ledger.read(session.paths.ledger)
    return every > 0 and keeps_since_revalidation(rows, session.lane_id) >= every


# -- running it ------------------------------------------------------------------------------------------------
class _Locks:
    """The session's experiment lock (one run that times at a time) and the lane's GPUs."""

    def __init__(self, session: Session):
        self.lock = gpu_locks.hold_session_lock(session.paths, "re-validate when it has finished")
        try:
            self.gpus = gpu_locks.acquire_lane(session.target)
        except BaseException:
            self.lock.release()
            raise

    def release(self) -> None:
        gpu_locks.release(self.gpus)
        self.lock.release()


def _check(session: Session) -> tuple[str, str]:
    """Refuse before anything is written; returns (best commit, original baseline commit)."""
    record = session.require_current_layout()
    pointer = record.baselines.get(session.lane_id)
    if pointer is None:
        raise Refused(f"lane {session.lane_id} has no baseline yet: run `dit-ar baseline` first")
    if session.paths.halt.exists():
        raise Refused(f"an earlier run changed what the harness relies on ({session.paths.halt}); repair that and "
                      f"delete {session.paths.halt} first")
    best = require_best(session.best(), session.lane_id)
    if best.commit == pointer.commit:
        raise Refused("the best is still the original baseline: nothing to re-validate until an experiment is "
                      "kept", way_out="run it after the first KEEP of `dit-ar experiment`")
    problems = verify_integrity(session)
    if problems:
        raise Refused("fixed files differ from integrity.json: " + "; ".join(problems[:5]), way_out=INTEGRITY_WAY_OUT)
    baseline = session.verified_baseline()
    changed = versions.stack_differences(baseline.environment, versions.stack(versions.collect()))
    if changed:
        raise Refused(f"the software stack changed since the baseline ({'; '.join(changed)}): timings would compare "
                      "two stacks; restore the recorded versions")
    return best.commit, pointer.commit


def plan_for(session: Session, launcher: Any, run_dir: Path) -> MeasurementPlan:
    """The best's tree (candidate side) against the original baseline's (best side), guardrails off: this
    measures, it decides nothing."""
    lane, paths = session.lane, session.paths
    cand = Side("best", paths.best_worktree, lane.workload(launcher.model_root(paths.best_worktree), session.root))
    origin = Side("baseline", paths.origin_worktree,
                  lane.workload(launcher.model_root(paths.origin_worktree), session.root))
    cases = load_corpus(session.root / lane.corpus)
    return MeasurementPlan(cand=cand, best=origin, protocol=lane.performance, prompts=tuple(c.prompt for c in cases),
                           batch=lane.batch, metric=lane.primary_metric,
                           guardrails=Guardrails(memory_growth_pct=None, startup_growth_pct=None),
                           is_cuda=lane.is_cuda, log_dir=run_dir, resolution=lane.resolution,
                           bound=read_noise(paths, session.lane_id).against(paths_origin_commit(session))
                           .bound(lane.performance, lane.device))


def paths_origin_commit(session: Session) -> str:
    """The lane's original baseline commit (what the noise state is pooled against for this comparison)."""
    return session.started.baselines[session.lane_id].commit


def _holdout(session: Session, launcher: Any, run_dir: Path, effective_class: str) -> holdout.HoldoutResult:
    cases = holdout.holdout_cases(session)
    if not cases:
        return holdout.not_judged(effective_class, f"lane {session.lane.name} has no holdout_corpus")
    tree = session.paths.best_worktree
    with launcher.worker("best", tree, run_dir / "worker-best-holdout.log") as worker:
        worker.request("build", spec=session.lane.workload(launcher.model_root(tree), session.root))
        outputs = holdout.generate(worker, session, cases, desc="holdout")
    return holdout.judge(session, cases, outputs, effective_class, session.verified_baseline().envelope)


def revalidate(config_path: Path, lane: str | None = None, sandboxed: bool = True,
               out: Callable[[str], None] = print, judge_only: bool = False, run_id: str = "") -> int:
    """Measure, judge the holdout, record; exit 0 (also when the two disagree: the warning says so). A fleet's
    judge (`judge_only`) writes its row into the run folder for the session's own process (loop/conclusion.py)."""
    session = open_session(config_path, lane)
    best_commit, baseline_commit = _check(session)
    launcher = launcher_for(session, sandboxed)
    locks = _Locks(session)
    try:
        return _run(session, launcher, best_commit, baseline_commit, sandboxed, out, judge_only, run_id)
    finally:
        locks.release()


def _run(session: Session, launcher: Any, best_commit: str, baseline_commit: str, sandboxed: bool,
         out: Callable[[str], None], judge_only: bool = False, run_id: str = "") -> int:
    started = time.time()
    repo = gitops.open_repo(session.root)
    run_dir = session.paths.run(run_id or new_run_id("revalid"))
    run_dir.mkdir(parents=True, exist_ok=True)
    best = require_best(session.best(), session.lane_id)
    live = LiveFile.start(session.paths.live, "revalidate", run_dir.name, best_commit,
                          f"re-validation against the original baseline {baseline_commit[:10]}", session.lane_id)
    try:
        gitops.sync_worktree(repo, session.paths.best_worktree, best_commit)
        gitops.sync_worktree(repo, session.paths.origin_worktree, baseline_commit)
        plan = plan_for(session, launcher, run_dir)
        out(f"re-validating {best_commit[:10]} against the original baseline {baseline_commit[:10]} "
            f"(up to {plan.segments_allowed()} segments of fresh worker pairs)")
        live.update(phase="timing", max_segments=plan.segments_allowed())
        perf = measure(plan, launcher, on_round=live.on_round, on_look=live.on_look)
        write_json_atomic(runs.RunPaths(run_dir).perf, perf.to_dict())
        live.phase("quality")
        held = _holdout(session, launcher, run_dir, best.effective_class)
        try:
            fresh = _confirmation(session, launcher, run_dir, out, judge_only, live)
        except Refused as exc:  # the re-validation stands; the confirmation says why it did not run
            out(f"confirmation: not run ({exc})")
            fresh = None
        live.phase("the best against itself, side-blind")
        roles = role_check.judge_best(session, launcher, run_dir, best, "dit-ar revalidate")
        result = dataclasses.replace(_result(session, run_dir.name, best_commit, baseline_commit, plan, perf, held,
                                             {**perf.seconds, "total": time.time() - started}, best.history),
                                     role_check=roles, confirmation=fresh.headline() if fresh else "")
        write_json_atomic(run_dir / RECORD, result.as_dict())
        row = _row(session, result, perf, run_dir, sandboxed)
        if judge_only:
            write_json_atomic(run_dir / conclusion.ROW, row.as_dict())
        else:
            ledger.append(session.paths.ledger, row)
        live.finish(Status.REVALIDATE.verdict_word)
    except CandidateCrash as exc:
        out(f"the best crashed while it was re-validated (nothing recorded): {str(exc).splitlines()[0]}")
        return 1
    finally:
        if not live.state.finished:
            live.finish("NO VERDICT")
    out(result.headline())
    warning = result.warning()
    if warning:
        out(warning)
    finding = read_roles(session.paths, session.lane_id).finding
    if result.role_check is not None:
        out(result.role_check.line())
    if result.role_check is not None and result.role_check.role_dependent and finding is not None:
        out("WARNING: " + finding.refusal())
    out(f"evidence in {run_dir.relative_to(session.root) if judge_only else run_dir}")
    return 0


def _result(session: Session, run_id: str, best_commit: str, baseline_commit: str, plan: MeasurementPlan,
            perf: PerfRecord, held: holdout.HoldoutResult, seconds: dict[str, float],
            history: tuple[str, ...]) -> Revalidation:
    metric = session.lane.primary_metric
    look = cumulative_look(perf)
    measured = Interval.from_look(look, metric) if look is not None else None
    steps = chain_steps(session, ledger.read(session.paths.ledger), history + (best_commit,))
    return Revalidation(run_id, session.lane_id, best_commit, baseline_commit, metric, measured,
                        chain_product(steps, metric), tuple(steps), len(perf.segments), perf.rounds, held, now(),
                        seconds, tuple(perf.reasons))


def _row(session: Session, result: Revalidation, perf: PerfRecord, run_dir: Path, sandboxed: bool) -> LedgerRow:
    lane = session.lane
    best = require_best(session.best(), session.lane_id)
    product = result.product.describe() if result.product else "no kept steps"
    agree = {True: "agrees with", False: "DISAGREES with", None: "not compared with"}[result.agree]
    return LedgerRow(
        timestamp=now(), run_id=result.run_id, lane=session.lane_id, commit=result.best_commit,
        parent=result.baseline_commit, status=Status.REVALIDATE, effective_class=best.effective_class,
        metric=lane.primary_metric, best_before=lane.metric_value(perf.median_ms(Role.BEST)),
        candidate=lane.metric_value(perf.median_ms(Role.CANDIDATE)),
        improvement_pct=result.measured.estimate_pct if result.measured else None, p_value=perf.nominal_p,
        peak_vram_mb=perf.peak_memory_mb(Role.CANDIDATE),
        quality_summary=result.holdout.headline() + (f"; {result.confirmation}" if result.confirmation else ""),
        description=f"re-validation of the best against the original baseline {result.baseline_commit[:10]}",
        run_dir=str(run_dir.relative_to(session.root)),
        reason=f"measured {result.measured.describe() if result.measured else 'nothing'} {agree} the product of "
               f"{len(result.steps)} kept steps {product}" + ("; the best is ROLE-DEPENDENT (roles.json)"
                                                              if result.role_check and result.role_check.role_dependent
                                                              else ""), flags="" if sandboxed else "unsandboxed")


# -- the best confirmed on fresh seeds (loop/quality/confirmation.py) -----------------------------------------
NO_KEY = ("this session has no secret seed key (made before keyed seeds): its best cannot be confirmed on fresh "
          "seeds; a new session (`dit-ar init --tag NEW`) has one")


def approximate_keeps(session: Session) -> list[LedgerRow]:
    """The keeps of the best's chain whose class against the original baseline is approximate or quantization,
    in order."""
    best = require_best(session.best(), session.lane_id)
    chain = set(best.history) | {best.commit}
    return [r for r in ledger.read(session.paths.ledger) if r.status is Status.KEEP and r.lane == session.lane_id
            and r.commit in chain and r.effective_class in ("approximate", "quantization")]


def revert_advice(session: Session, keeps: list[LedgerRow]) -> str:
    """What to do when the best is not confirmed: revert the first approximate or quantization keep of its chain.
    A revert judged in this session is slower than the best and is discarded on speed, so it is a new session
    started at the commit before that keep, with the later keeps brought back one at a time."""
    if not keeps:
        return ""
    first = keeps[0]
    best = require_best(session.best(), session.lane_id)
    later = best.history[best.history.index(first.commit) + 1:] if first.commit in best.history else ()
    tag = f"{session.started.tag}-without-{first.commit[:7]}"
    again = f", then bring back the later keeps {', '.join(c[:10] for c in later)} one at a time " \
            "(`git cherry-pick -n <commit>`, commit, `dit-ar experiment ...`)" if later else ""
    return (f"not confirmed changes nothing (the best stays); revert the {first.effective_class} keep "
            f"{first.commit[:10]} ({first.description}): a revert judged in this session is slower than the best "
            f"and would be discarded on speed, so go on from the commit before it: `git switch --detach "
            f"{first.commit[:10]}^ && dit-ar init --tag {tag} --new-baseline && dit-ar baseline`{again}")


def _confirmation(session: Session, launcher: Any, run_dir: Path, out: Callable[[str], None], judge_only: bool,
                  live: Any = None) -> confirmed.ConfirmationRecord | None:
    """Confirm the best on fresh seeds when its class against the original baseline asks for it (None when it does
    not); the lane's record and the run folder's copy (a fleet's judge: the copy alone)."""
    record = session.started
    best = require_best(session.best(), session.lane_id)
    if not confirmed.needs_confirmation(best, record.baselines[session.lane_id].commit):
        return None
    if not record.seed_key:
        out(f"confirmation: {NO_KEY}")
        return None
    keeps = approximate_keeps(session)
    chain = any(r.effective_class == "approximate" for r in keeps)
    cls = confirmation.judged_class(best.effective_class, chain)
    out(f"confirming the best {best.commit[:10]} ({best.effective_class}) against the original baseline on fresh "
        f"seeds: {confirmation.planned(session, cls)} cases or more on both sides, generated and scored now")
    if live is not None:
        live.phase("confirmation on fresh seeds")
    result = confirmation.confirm(session, launcher, session.paths.origin_worktree, session.paths.best_worktree,
                                  run_dir, chain, live)
    result = dataclasses.replace(result, revert="" if result.confirmed else revert_advice(session, keeps))
    if judge_only:
        confirmed.write_run_copy(run_dir, result)
    else:
        confirmed.write(session.paths, result, run_dir)
    out(f"confirmation: {result.headline()}")
    for line in result.test_lines() + ([result.revert] if result.revert else []):
        out(f"  {line}")
    return result


def confirm_best(config_path: Path, lane: str | None = None, sandboxed: bool = True,
                 out: Callable[[str], None] = print) -> confirmed.ConfirmationRecord | None:
    """`dit-ar summary` and `dit-ar report`: confirm the best when it needs a confirmation and has none stored
    (None: nothing to do). Refused (nothing written) while another run holds the session's lock, or when the
    fixed files or the baseline changed."""
    session = open_session(config_path, lane)
    record = session.require_current_layout()
    pointer = record.baselines.get(session.lane_id)
    best = session.best()
    if pointer is None or not confirmed.needs_confirmation(best, pointer.commit):
        return None
    assert best is not None
    if not record.seed_key:
        raise Refused(NO_KEY)
    runs_of_best = tuple(session.root / r.run_dir for r in ledger.read(session.paths.ledger)
                         if r.status is Status.REVALIDATE and r.lane == session.lane_id and r.commit == best.commit)
    if confirmed.of_best(session.paths, session.lane_id, best.commit, runs_of_best) is not None:
        return None
    problems = verify_integrity(session)
    if problems:
        raise Refused("fixed files differ from integrity.json: " + "; ".join(problems[:5]), way_out=INTEGRITY_WAY_OUT)
    session.verified_baseline()
    launcher = launcher_for(session, sandboxed)
    locks = _Locks(session)
    try:
        repo = gitops.open_repo(session.root)
        gitops.sync_worktree(repo, session.paths.best_worktree, best.commit)
        gitops.sync_worktree(repo, session.paths.origin_worktree, pointer.commit)
        run_dir = session.paths.run(new_run_id("confirm"))
        run_dir.mkdir(parents=True, exist_ok=True)
        return _confirmation(session, launcher, run_dir, out, judge_only=False)
    finally:
        locks.release()
