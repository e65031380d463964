"""`dit-ar report`: a static HTML page with PNG figures of the session, or of one run.

The page is self-contained: every figure is written next to it under `report_files/` and linked
relatively, so the folder can be copied anywhere. The report only reads the state directory.

This module reads the state files into typed view data (the frozen dataclasses of views.py) and renders each
page with one call to a Jinja2 template of `templates/`; the environment escapes every value on output,
so no text from the state (descriptions, reasons, crash logs, device names) can become markup.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from dit_ar_contract.config import gpu_seconds_per_image, repo_root_for
from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status

from ..state import ledger, runs
from ..state.baseline import BaselineSummary, cases_dir
from ..state.best import BestRecord
from ..state.ledger import LedgerRow
from ..state.paths import StatePaths
from ..state.perf_record import PerfRecord, SegmentRecord
from ..state.runs import ProfileRecord, RunPaths
from ..state.session import SessionRecord
from . import summary
from .views import (
    ASSETS,
    MAX_RUNS,
    CaseImages,
    Fact,
    Figure,
    LaneHeader,
    LaneSection,
    PerfView,
    ProfileView,
    QualityView,
    ReportContext,
    Row,
    RunPage,
    RunView,
    SessionPage,
    StatusStyle,
    Style,
    Table,
)

if TYPE_CHECKING:  # quality.json's types; torch is imported only where a quality record is read
    from quality_suite.assessment import CaseResult, QualityAssessment

TEMPLATES = "templates"  # the package folder of the page templates (package data)
WORST_CASES = 4
FIDELITY_COLUMNS = ("psnr_db", "ssim", "latent_rel_l2", "latent_max_abs")
BLOCK_COLUMNS = ("rounds", "best_median_ms", "cand_median_ms", "best_p95_ms", "cand_p95_ms", "median_ratio",
                 "ci_upper_ratio", "improvement_pct", "p_value", "passes")  # runs made before the sequential test
LOOK_COLUMNS = ("rounds", "estimate_pct", "lower_pct", "upper_pct", "z", "boundary", "decision")
WRAPPED_COLUMNS = ("quality_summary", "description")  # ledger columns of free text, wrapped on the page


# -- rendering ----------------------------------------------------------------------------------

@cache
def environment() -> Environment:
    """The Jinja2 environment of the package's templates; every value is HTML-escaped on output."""
    return Environment(loader=PackageLoader("pytest_dit_ar.report", TEMPLATES), autoescape=True,
                       undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def _style() -> Style:
    """The status colours and wrapped ledger columns for the style sheet."""
    return Style(tuple(StatusStyle(s.word, s.colour) for s in Status),
                 tuple(ledger.COLUMNS.index(c) + 1 for c in WRAPPED_COLUMNS))


def _render(template: str, page: SessionPage | RunPage, path: Path) -> Path:
    """Render one page to `path` and return it."""
    path.write_text(environment().get_template(template).render(page=page, style=_style()), encoding="utf-8")
    return path


# -- helpers ------------------------------------------------------------------------------------

def _plots() -> Any:
    """The plotting module, imported on first use so that other dit-ar verbs do not load matplotlib."""
    from . import plots

    return plots


def fmt(value: Any) -> str:
    """A value as short text: None as empty, floats to 4 significant digits (whole numbers from 1000 up)."""
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.0f}" if 1e3 <= abs(value) < 1e12 else f"{value:.4g}"
    return str(value)


def _or_na(value: Any) -> str:
    """A value as short text, 'n/a' when absent."""
    return "n/a" if value is None else fmt(value)


def _pairs(values: dict[str, Any]) -> str:
    """`k=v, ...` of a mapping, values formatted."""
    return ", ".join(f"{k}={fmt(v)}" for k, v in values.items())


def _table(header: list[str], rows: list[list[Any]], row_classes: list[str] | None = None, css: str = "") -> Table:
    """A table of formatted cells."""
    classes = row_classes or [""] * len(rows)
    return Table(tuple(header), tuple(Row(tuple(fmt(c) for c in row), rc) for rc, row in zip(classes, rows)), css)


def _figure(png: Path, alt: str) -> Figure:
    """A figure in the assets folder, linked relative to the page."""
    return Figure(f"{ASSETS}/{png.name}", alt)


def _slug(text: str) -> str:
    """A file-name-safe form of a lane or run id."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


# -- header -------------------------------------------------------------------------------------

def target_name(config_path: Path) -> str | None:
    """The target's name as the config file spells it, without validating the rest (for read-only views of
    a session whose config may be of another version); None when the file does not say."""
    try:
        data = json.loads(Path(config_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    target = data.get("target") if isinstance(data, dict) else None
    name = target.get("name") if isinstance(target, dict) else None
    return name if isinstance(name, str) else None


def device_label(lane_id: str, session: SessionRecord | None, baseline: BaselineSummary | None,
                 target_name: str) -> str:
    """The lane's device in words; a foreign lane is named by its own device, never as the target."""
    identity = baseline.device if baseline else None
    name, kind = (identity.name, identity.kind) if identity else (None, None)
    on_target: bool | None = None
    if session is not None and session.lane_id == lane_id:
        if session.device.kind != "none" or session.device.name:
            name, kind = session.device.name, session.device.kind
        on_target = session.on_target
    name = name or (lane_id.split("@", 1)[1] if "@" in lane_id else "unknown device")
    if kind == "cpu":
        return f"CPU: {name}"
    if "@" in lane_id or on_target is False:
        return f"foreign lane on {name} (never compared with {target_name} results)"
    return f"{name} (the target)" if on_target else name


def _header(lane_id: str, rows: list[LedgerRow], ctx: ReportContext) -> LaneHeader:
    """The lane's summary: device, best commit, baseline metrics, noise floor, counts."""
    baseline = runs.read_baseline(ctx.paths.baseline(lane_id) / runs.BASELINE_RECORD)
    best = ctx.best.get(lane_id)
    timing = baseline.timing if baseline else None
    counts = ", ".join(f"{s.word}={n}" for s in Status if (n := sum(r.status is s for r in rows)))
    session = ctx.session
    measurements = best.measurements if best else None
    facts = [
        ("lane", lane_id),
        ("device", device_label(lane_id, session, baseline, ctx.target_name)),
        ("session", f"{session.tag} (branch {session.branch})"
         if session and ctx.is_session_lane(lane_id) else "not the current session's lane"),
        ("best commit", f"{best.commit[:12]} (run {best.run_id}) {_measurements(best)}" if best else "none"),
        ("baseline commit", baseline.commit[:12] if baseline else "no baseline yet"),
        ("baseline latency", f"median {_or_na(timing and timing.median_ms)} ms, "
                             f"p95 {_or_na(timing and timing.p95_ms)} ms per batch"),
        ("GPU-seconds per image", _gpu_seconds(baseline, timing and timing.median_ms,
                                               measurements and measurements.median_ms)),
        ("noise floor (A/A)", f"{_or_na(timing and timing.noise_floor_pct)} % between two fresh processes of the "
                              f"baseline, interval [{', '.join(fmt(x) for x in timing.noise_interval_pct)}]"
         if timing else "n/a"),
        ("baseline task metrics", (_pairs(baseline.task_metrics) if baseline else "") or "none"),
        ("quality noise envelope", (_pairs(baseline.envelope) if baseline else "") or "none"),
        ("ledger rows", counts or "none"),
        ("the best on fresh seeds", _confirmed(lane_id, rows, ctx)),
    ]
    return LaneHeader(lane_id, tuple(Fact(name, value) for name, value in facts))


def _confirmed(lane_id: str, rows: list[LedgerRow], ctx: ReportContext) -> str:
    """The best's confirmation on fresh seeds against the original baseline, in one paragraph."""
    view = summary.confirmation_view(ctx.root, rows, lane_id, ctx.best.get(lane_id),
                                     ctx.confirm_skipped and ctx.is_session_lane(lane_id), ctx.confirm_why_not)
    return "; ".join((view.headline, *view.lines))


def _measurements(best: BestRecord) -> str:
    m = best.measurements
    return _pairs({k: v for k, v in (("median_ms", m.median_ms), ("p95_ms", m.p95_ms)) if v is not None})


def _gpu_seconds(baseline: BaselineSummary | None, baseline_ms: Any, best_ms: Any) -> str:
    """Latency times the GPUs the worker held, per image: what a multi-GPU candidate must beat to be cheaper."""
    if baseline is None:
        return "not a GPU lane"
    device, gpus, batch = baseline.workload_device, baseline.gpus, baseline.batch
    if not device.startswith("cuda"):
        return "not a GPU lane"
    parts = [f"{label} {value:.3g}" for label, ms in (("baseline", baseline_ms), ("best", best_ms))
             if isinstance(ms, (int, float)) and (value := gpu_seconds_per_image(ms, device, gpus, batch)) is not None]
    return (", ".join(parts) or "n/a") + f" ({gpus} GPU{'s' if gpus > 1 else ''}, batch {batch})"


def _progress(lane_id: str, rows: list[LedgerRow], assets: Path) -> Figure:
    """The lane's progress plot (experiment number vs primary metric)."""
    points = [_plots().Point(i, r.status.word, r.candidate) for i, r in enumerate(rows)]
    metric = next((r.metric for r in rows if r.metric), "metric")
    png = _plots().progress(points, metric, f"{lane_id}: {metric} per experiment",
                            assets / f"progress-{_slug(lane_id)}.png")
    return _figure(png, f"progress of lane {lane_id}")


# -- stage attribution --------------------------------------------------------------------------

def _arithmetic(paths: StatePaths, lane_id: str, best: BestRecord | None) -> str:
    """The best's achieved TFLOP/s and share of the card's measured peak, from a profile of the best itself."""
    found = runs.arithmetic_of(paths.runs, lane_id, best.commit) if best else None
    return f"the best: {found.line()}" if found else "the best is not profiled: `dit-ar profile` of the best gives " \
        "its achieved TFLOP/s and the share of the card's measured peak"


def _profile(paths: StatePaths, lane_id: str, assets: Path, best: BestRecord | None = None) -> ProfileView:
    """Stage-attribution bars, headline figures and top ops of the lane's latest profile, or what is missing; and
    the best's arithmetic."""
    arithmetic = _arithmetic(paths, lane_id, best)
    found = runs.latest_profile(paths.runs, lane_id)
    if found is None:
        return ProfileView(found=False, arithmetic=arithmetic)
    folder, profile = found
    where = folder.name + (f", commit {profile.commit[:10]}" if profile.commit else "")
    if not profile.stages:
        return ProfileView(found=True, where=where, arithmetic=arithmetic)
    png = _plots().stages(profile.stages, f"stage attribution ({where})", assets / f"profile-{_slug(lane_id)}.png")
    return ProfileView(found=True, where=where, figure=_figure(png, "stage attribution"),
                       facts=_table(["profile", "value"], [list(f) for f in profile.facts]) if profile.facts else None,
                       ops=_ops(profile), arithmetic=arithmetic)


def _ops(profile: ProfileRecord) -> Table | None:
    """The profile's ten top ops by self time."""
    ops = profile.top_ops[:10]
    return _table(["self ms", "calls", "top op"], [[op.self_ms, op.calls, op.name[:120]] for op in ops]) if ops \
        else None


# -- one run ------------------------------------------------------------------------------------

def _worst_cases(quality: QualityAssessment) -> list[tuple[str, CaseResult]]:
    """The WORST_CASES cases furthest from the baseline (lowest PSNR, then highest latent error)."""
    def key(item: tuple[str, CaseResult]) -> tuple[float, float]:
        """Sort key: PSNR ascending, then latent error descending."""
        fid = item[1].fidelity
        return (float(fid.get("psnr_db", math.inf)), -float(fid.get("latent_rel_l2", 0.0)))

    return sorted(quality.per_case.items(), key=key)[:WORST_CASES]


def _worst_table(worst: list[tuple[str, CaseResult]]) -> Table:
    """The worst cases' fidelity and failed checks."""
    rows = [[cid] + [case.fidelity.get(c) for c in FIDELITY_COLUMNS]
            + [", ".join(ch.name for ch in case.checks if not ch.passed)] for cid, case in worst]
    return _table(["worst case"] + list(FIDELITY_COLUMNS) + ["failed checks"], rows)


def _tests_table(quality: QualityAssessment) -> Table | None:
    """One row per paired task-score test: the degradation, its one-sided bounds, the standard error and the spread
    floor's, the margin, cases, decision."""
    rows = [[r.metric, r.reference, r.last.estimate, r.last.lower, r.last.upper, r.last.se, r.last.floor_se,
             r.margin, r.margin_source, r.last.n, len(r.looks),
             r.decision.value + (f" ({r.reason})" if r.reason else "")]
            for r in quality.task_tests if r.looks]
    if not rows:
        return None
    return _table(["task score", "against", "degradation", "lower bound", "upper bound", "se", "at-margin floor",
                   "margin", "margin is", "cases", "looks", "decision"], rows)


def _quality(run: RunPaths, lane_id: str, paths: StatePaths, assets: Path, shown: tuple[str, ...]) -> QualityView:
    """Class audit, failed checks not already in `shown`, the worst cases' fidelity and their images."""
    quality = runs.read_quality(run.dir)
    if quality is None:
        return QualityView(found=False)
    failures = [c.describe() for c in quality.failures()]
    worst = _worst_cases(quality)
    images = None
    if worst and not math.isinf(float(worst[0][1].fidelity.get("psnr_db", 0.0))):
        images = _case_images(run, [cid for cid, _ in worst], cases_dir(paths.baseline(lane_id)), assets)
    return QualityView(found=True, declared=fmt(quality.declared_class), effective=fmt(quality.effective_class),
                       audit="; ".join(quality.audit_reasons), failed_count=len(failures),
                       more_failures=tuple(f for f in failures if f not in shown)[:10],
                       worst=_worst_table(worst) if worst else None, images=images, tests=_tests_table(quality))


def _case_images(run: RunPaths, case_ids: list[str], baseline_cases: Path, assets: Path) -> CaseImages:
    """The run's own worst_cases.png, else a baseline | candidate | diff grid from the images that exist."""
    prefix = _slug(run.dir.name)
    if run.worst_cases.is_file():
        dest = assets / f"{prefix}-{runs.WORST_CASES}"
        shutil.copyfile(run.worst_cases, dest)
        return CaseImages(_figure(dest, "worst cases"), candidates_missing=False, baseline_missing=False)
    grid = [(cid, baseline_cases / f"{cid}.png", run.case_image(cid)) for cid in case_ids]
    grid = [(cid, b, c if c.is_file() else None) for cid, b, c in grid if b.is_file()]
    figure = None
    if grid:
        figure = _figure(_plots().image_grid(grid, assets / f"{prefix}-cases.png"),
                         "baseline vs candidate, worst cases")
    return CaseImages(figure, candidates_missing=not grid or all(c is None for _, _, c in grid),
                      baseline_missing=not grid)


def _look_cells(segment: SegmentRecord) -> list[Any]:
    look = segment.look
    if look is None:
        return [None] * len(LOOK_COLUMNS)
    return [look.rounds, look.estimate_pct, look.lower_pct, look.upper_pct, look.z, look.boundary, look.decision]


def _block_cells(segment: SegmentRecord) -> list[Any]:
    b = segment.stats
    if b is None:
        return [None] * len(BLOCK_COLUMNS)
    return [b.rounds, b.best_median_ms, b.cand_median_ms, b.best_p95_ms, b.cand_p95_ms, b.median_ratio,
            b.ci_upper_ratio, b.improvement_pct, b.p_value, b.passes]


def _segment_table(perf: PerfRecord) -> Table:
    """The sequential test's look after each segment, or the per-block stats of runs made before it."""
    if perf.sequential:
        return _table(["segment"] + list(LOOK_COLUMNS) + ["divergence"],
                      [[p.index + 1] + _look_cells(p) + [p.divergence] for p in perf.segments])
    return _table(["block"] + list(BLOCK_COLUMNS) + ["divergence"],
                  [[p.index + 1] + _block_cells(p) + [p.divergence] for p in perf.segments])


def _perf(run: RunPaths, assets: Path) -> PerfView:
    """Timing distribution plot and the sequential test's look after each segment (perf.json)."""
    perf = runs.read_timing(run.dir)
    if perf is None or not perf.segments:
        return PerfView(figure=None)
    png = _plots().timing(list(perf.segments), assets / f"{_slug(run.dir.name)}-timing.png")
    return PerfView(figure=_figure(png, "timing distribution"), table=_segment_table(perf),
                    wall_time=", ".join(f"{k} {fmt(v)} s" for k, v in perf.seconds.items()),
                    reasons=tuple(fmt(r) for r in perf.reasons))


def _run_line(row: LedgerRow) -> str:
    """Commit, parent and the measured metric of a ledger row, leaving out what is empty."""
    cell = ledger.cell
    parts = [f"commit {row.commit[:12]}" + (f" on {row.parent[:12]}" if row.parent else "")]
    if row.candidate is not None:
        parts.append(f"{row.metric} {cell(row.candidate)}" +
                     (f" vs best {cell(row.best_before)}" if row.best_before is not None else ""))
    if row.improvement_pct is not None:
        p_value = f", p={cell(row.p_value)}" if row.p_value is not None else ""
        parts.append(f"improvement {cell(row.improvement_pct)} %{p_value}")
    if row.declared_class and row.effective_class not in ("", row.declared_class):
        parts.append(f"class {row.declared_class} raised to {row.effective_class}")
    return "; ".join(parts)


def run_view(row: LedgerRow | None, run_id: str, root: Path, paths: StatePaths, assets: Path) -> RunView:
    """Everything one run left behind: verdict, reasons, crash, quality and timing (figures written to assets).
    `row` is None for a run folder with neither a ledger row nor a whole experiment.json."""
    run = RunPaths(root / row.run_dir if row and row.run_dir else paths.run(run_id))
    reasons = tuple(fmt(r) for r in runs.read_experiment(run.dir).reasons)
    status = row.status.word if row else ""
    head = RunView(run_id=run_id, status=status, description=fmt(row.description) if row else "",
                   line=_run_line(row) if row else "", reasons=reasons, run_dir=row.run_dir if row else "")
    if not run.dir.is_dir():
        where = run.dir.relative_to(root) if run.dir.is_relative_to(root) else run.dir
        return replace(head, missing_folder=str(where))
    is_baseline = row is not None and row.status is Status.BASELINE
    return replace(
        head, crash=run.crash_text(),
        quality=None if is_baseline else _quality(run, row.lane if row else "", paths, assets, reasons),
        perf=_perf(run, assets), logs=run.logs())


def current_session(rows: list[LedgerRow]) -> list[LedgerRow]:
    """One lane's rows from its latest baseline on (earlier sessions stay in the ledger table)."""
    starts = [i for i, r in enumerate(rows) if r.status is Status.BASELINE]
    return rows[starts[-1]:] if starts else rows


def ledger_view(rows: list[LedgerRow]) -> Table | None:
    """The ledger with every column, rows coloured by status; None when there are no rows."""
    if not rows:
        return None
    return _table(list(ledger.COLUMNS), [r.cells(ledger.COLUMNS) for r in rows],
                  [f"s-{r.status.word}" for r in rows], css="ledger")


# -- pages --------------------------------------------------------------------------------------

def _prepare(out: Path) -> Path:
    """Create the output folder and an emptied assets folder (only our own PNGs are removed)."""
    assets = out / ASSETS
    assets.mkdir(parents=True, exist_ok=True)
    for old in assets.glob("*.png"):
        old.unlink()
    return assets


def _context(config_path: Path, skipped: bool = False, why_not: str = "") -> ReportContext:
    """Root, state paths, session and target name; read-only, so a lane need not run here nor the config validate."""
    config_path = Path(config_path)
    if not config_path.is_file():
        raise Refused(f"{config_path} does not exist: pass the session's --config (the report is written beside it)")
    root = repo_root_for(config_path)
    paths = StatePaths(root)
    return ReportContext(root=root, paths=paths, session=runs.read_session(paths), best=runs.read_bests(paths),
                         target_name=target_name(config_path) or "the target device", confirm_skipped=skipped,
                         confirm_why_not=why_not)


def _lane_section(lane_id: str, rows: list[LedgerRow], ctx: ReportContext, assets: Path) -> LaneSection:
    """One lane of the session page: header, progress, profile and its newest runs."""
    mine = current_session([r for r in rows if r.lane == lane_id])
    return LaneSection(header=_header(lane_id, mine, ctx), progress=_progress(lane_id, mine, assets),
                       profile=_profile(ctx.paths, lane_id, assets, ctx.best.get(lane_id)),
                       runs=tuple(run_view(r, r.run_id, ctx.root, ctx.paths, assets)
                                  for r in reversed(mine[-MAX_RUNS:])))


def session_report(config_path: Path, out: Path | None = None, skipped: bool = False, why_not: str = "") -> Path:
    """The session page: per lane the header (with the best's confirmation on fresh seeds: `skipped` when it was
    left out, `why_not` when it was refused), progress, profile, runs and ledger; returns index.html."""
    ctx = _context(config_path, skipped, why_not)
    out = out or ctx.paths.report
    assets = _prepare(out)
    rows = ledger.read(ctx.paths.ledger)
    session_lane = [ctx.session.lane_id] if ctx.session and ctx.session.lane_id else []
    lanes = list(dict.fromkeys([r.lane for r in rows] + session_lane))
    tag = ctx.session.tag if ctx.session and ctx.session.tag else "?"
    page = SessionPage(title=f"dit-ar report: session {tag}", state_dir=str(ctx.paths.dir),
                       row_count=len(rows), lanes=tuple(_lane_section(lane, rows, ctx, assets) for lane in lanes),
                       ledger=ledger_view(rows), summary=SUMMARY_FILE, warnings=_warnings(ctx, lanes))
    lane_id = ctx.session.lane_id if ctx.session else None
    (out / SUMMARY_FILE).write_text(summary.markdown(ctx.root, lane_id, skipped=skipped, why_not=why_not),
                                    encoding="utf-8")
    return _render("session.html", page, out / "index.html")


SUMMARY_FILE = "summary.md"


def _warnings(ctx: ReportContext, lanes: list[str]) -> tuple[str, ...]:
    """Each lane's latest re-validation warning (the chain measured again disagrees with its steps)."""
    rows = ledger.read(ctx.paths.ledger)
    found = (summary.revalidation_warning(ctx.root, summary.session_rows(rows, lane)) for lane in lanes)
    return tuple(f"{lane}: {w}" for lane, w in zip(lanes, found) if w)


def _run_row(paths: StatePaths, run_id: str, rows: list[LedgerRow]) -> LedgerRow | None:
    """The run's last ledger row, else the one its experiment.json holds (None when it holds none)."""
    if rows:
        return rows[-1]
    return runs.read_experiment(paths.run(run_id)).row


def run_report(config_path: Path, run_id: str, out: Path | None = None) -> Path:
    """One run's page (runs/<id>/report.html by default); returns its path."""
    if Path(run_id).name != run_id or run_id in ("", ".", ".."):
        raise Refused(f"{run_id!r} is not a run id (a folder name under .autoresearch/runs/)")
    ctx = _context(config_path)
    all_rows = ledger.read(ctx.paths.ledger)
    rows = [r for r in all_rows if r.run_id == run_id]
    run_dir = ctx.paths.run(run_id)
    if not rows and not run_dir.is_dir():
        raise Refused(f"no run {run_id!r} in the ledger or in {ctx.paths.runs}")
    row = _run_row(ctx.paths, run_id, rows)
    out = out or run_dir
    assets = _prepare(out)
    lane_id = (row.lane if row else "") or (ctx.session.lane_id if ctx.session else "")
    lane_rows = current_session([r for r in all_rows if r.lane == lane_id])
    page = RunPage(title=f"dit-ar report: run {run_id}", header=_header(lane_id, lane_rows, ctx),
                   run=run_view(row, run_id, ctx.root, ctx.paths, assets), ledger=ledger_view(rows))
    return _render("run.html", page, out / "report.html")
