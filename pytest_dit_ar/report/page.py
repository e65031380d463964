"""`dit-ar report`: a static HTML page with PNG figures of the session, or of one run.

The page is self-contained: every figure is written next to it under `report_files/` and linked
relatively, so the folder can be copied anywhere. The report only reads the state directory.

This module reads the state files into typed view data (the frozen dataclasses below) and renders each
page with one call to a Jinja2 template of `templates/`; the environment escapes every value on output,
so no text from the state (descriptions, reasons, crash logs, device names) can become markup.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from dit_ar_contract.config import gpu_seconds_per_image, repo_root_for
from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status

from ..state import ledger
from ..state.files import read_json_object
from ..state.paths import StatePaths
from . import summary

ASSETS = "report_files"
TEMPLATES = "templates"  # the package folder of the page templates (package data)
WORST_CASES = 4
MAX_RUNS = 30  # runs shown in detail on the session page (newest first); `--run ID` shows any run
FIDELITY_COLUMNS = ("psnr_db", "ssim", "latent_rel_l2", "latent_max_abs")
BLOCK_COLUMNS = ("rounds", "best_median_ms", "cand_median_ms", "best_p95_ms", "cand_p95_ms", "median_ratio",
                 "ci_upper_ratio", "improvement_pct", "p_value", "passes")  # runs made before the sequential test
LOOK_COLUMNS = ("rounds", "estimate_pct", "lower_pct", "upper_pct", "z", "boundary", "decision")
PROFILE_FACTS = ("device", "batch", "steps", "stage_basis", "total_ms", "median_plain_ms", "denoise_per_step_ms",
                 "achieved_tflops", "percent_of_peak", "roofline_ms")
WRAPPED_COLUMNS = ("quality_summary", "description")  # ledger columns of free text, wrapped on the page


# -- view data ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class StatusStyle:
    """A status word and its colour (the ledger row and run section colours)."""

    word: str
    colour: str


@dataclass(frozen=True)
class Style:
    """What the style sheet takes from the code: status colours and the ledger columns that wrap (1-based)."""

    statuses: tuple[StatusStyle, ...]
    wrapped_columns: tuple[int, ...]


@dataclass(frozen=True)
class Figure:
    """A PNG in the assets folder, linked relative to the page."""

    src: str
    alt: str


@dataclass(frozen=True)
class Row:
    """A table row: its cells as text and its CSS class."""

    cells: tuple[str, ...]
    css: str = ""


@dataclass(frozen=True)
class Table:
    """A table with a header row."""

    header: tuple[str, ...]
    rows: tuple[Row, ...]
    css: str = ""


@dataclass(frozen=True)
class Fact:
    """One line of a lane's summary table."""

    name: str
    value: str


@dataclass(frozen=True)
class LaneHeader:
    """A lane's id and summary (device, best commit, baseline metrics, noise floor, counts)."""

    lane_id: str
    facts: tuple[Fact, ...]


@dataclass(frozen=True)
class ProfileView:
    """The lane's latest profile: not found, found without stage times (`figure` None), or shown."""

    found: bool
    where: str = ""
    figure: Figure | None = None
    facts: Table | None = None
    ops: Table | None = None


@dataclass(frozen=True)
class CaseImages:
    """The worst cases' images: the figure (if any) and which images are missing."""

    figure: Figure | None
    candidates_missing: bool
    baseline_missing: bool


@dataclass(frozen=True)
class QualityView:
    """A run's quality.json: class audit, failed checks, worst cases (`images` None: all pixel-identical)."""

    found: bool
    declared: str = ""
    effective: str = ""
    audit: str = ""
    failed_count: int = 0
    more_failures: tuple[str, ...] = ()
    worst: Table | None = None
    images: CaseImages | None = None


@dataclass(frozen=True)
class PerfView:
    """A run's timing: distribution figure, per-segment table, wall time, reasons (`figure` None: no timing)."""

    figure: Figure | None
    table: Table | None = None
    wall_time: str = ""
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunView:
    """Everything one run left behind; `missing_folder` names the run folder when it is gone."""

    run_id: str
    status: str
    description: str
    line: str
    reasons: tuple[str, ...]
    run_dir: str
    missing_folder: str = ""
    crash: str | None = None
    quality: QualityView | None = None  # None for a baseline run (it is the reference)
    perf: PerfView | None = None
    logs: tuple[str, ...] = ()


@dataclass(frozen=True)
class LaneSection:
    """One lane on the session page."""

    header: LaneHeader
    progress: Figure
    profile: ProfileView
    runs: tuple[RunView, ...]


@dataclass(frozen=True)
class SessionPage:
    """The session page (index.html)."""

    title: str
    state_dir: str
    row_count: int
    lanes: tuple[LaneSection, ...]
    ledger: Table | None
    assets: str = ASSETS
    max_runs: int = MAX_RUNS
    summary: str = ""  # the PR-ready summary.md written beside the page (report/summary.py)
    warnings: tuple[str, ...] = ()  # e.g. a re-validation that disagrees with the product of the kept steps


@dataclass(frozen=True)
class RunPage:
    """One run's page (report.html)."""

    title: str
    header: LaneHeader
    run: RunView
    ledger: Table | None


@dataclass(frozen=True)
class ReportContext:
    """What every part of a page reads: the repo root, state paths, session, best commits, target name."""

    root: Path
    paths: StatePaths
    session: dict[str, Any]
    best: dict[str, Any]
    target_name: str


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


_read = read_json_object


def _rows(path: Path) -> list[dict[str, str]]:
    """The ledger's rows as the text of their cells (what the page shows)."""
    return [dict(zip(ledger.COLUMNS, row.cells(ledger.COLUMNS))) for row in ledger.read(path)]


def _float(text: str) -> float | None:
    """A ledger cell as a number, None when empty or not a number."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


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

def device_label(lane_id: str, session: dict[str, Any], baseline: dict[str, Any], target_name: str) -> str:
    """The lane's device in words; a foreign lane is named by its own device, never as the target."""
    identity = (baseline.get("environment") or {}).get("device") or {}
    on_target: bool | None = None
    if session.get("lane_id") == lane_id:
        identity = session.get("device") or identity
        on_target = session.get("on_target")
    name = identity.get("name") or (lane_id.split("@", 1)[1] if "@" in lane_id else "unknown device")
    if identity.get("kind") == "cpu":
        return f"CPU: {name}"
    if "@" in lane_id or on_target is False:
        return f"foreign lane on {name} (never compared with {target_name} results)"
    return f"{name} (the target)" if on_target else name


def _header(lane_id: str, rows: list[dict[str, str]], ctx: ReportContext) -> LaneHeader:
    """The lane's summary: device, best commit, baseline metrics, noise floor, counts."""
    baseline = _read(ctx.paths.baseline(lane_id) / "baseline.json")
    best = ctx.best.get(lane_id) or {}
    timing = baseline.get("timing") or {}
    interval = timing.get("noise_interval_pct") or timing.get("noise_ci_ratio") or []  # the latter: older runs
    counts = ", ".join(f"{s.word}={n}" for s in Status if (n := sum(r["status"] == s.word for r in rows)))
    facts = [
        ("lane", lane_id),
        ("device", device_label(lane_id, ctx.session, baseline, ctx.target_name)),
        ("session", f"{ctx.session.get('tag')} (branch {ctx.session.get('branch')})"
         if ctx.session.get("lane_id") == lane_id else "not the current session's lane"),
        ("best commit", f"{str(best.get('commit', 'none'))[:12]} (run {best.get('run_id', '-')}) " +
         _pairs(best.get("measurements") or {})),
        ("baseline commit", str(baseline.get("commit", "no baseline yet"))[:12]),
        ("baseline latency", f"median {_or_na(timing.get('median_ms'))} ms, p95 {_or_na(timing.get('p95_ms'))} ms "
                             "per batch"),
        ("GPU-seconds per image", _gpu_seconds(baseline.get("workload") or {}, timing.get("median_ms"),
                                               (best.get("measurements") or {}).get("median_ms"))),
        ("noise floor (A/A)", f"{_or_na(timing.get('noise_floor_pct'))} % between two fresh processes of the "
                              f"baseline, interval [{', '.join(fmt(x) for x in interval)}]"),
        ("baseline task metrics", _pairs(baseline.get("task_metrics") or {}) or "none"),
        ("quality noise envelope", _pairs(baseline.get("envelope") or {}) or "none"),
        ("ledger rows", counts or "none"),
    ]
    return LaneHeader(lane_id, tuple(Fact(name, value) for name, value in facts))


def _gpu_seconds(workload: dict[str, Any], baseline_ms: Any, best_ms: Any) -> str:
    """Latency times the GPUs the worker held, per image: what a multi-GPU candidate must beat to be cheaper."""
    device, gpus, batch = str(workload.get("device", "")), int(workload.get("gpus", 1)), int(workload.get("batch", 1))
    if not device.startswith("cuda"):
        return "not a GPU lane"
    parts = [f"{label} {value:.3g}" for label, ms in (("baseline", baseline_ms), ("best", best_ms))
             if isinstance(ms, (int, float)) and (value := gpu_seconds_per_image(ms, device, gpus, batch)) is not None]
    return (", ".join(parts) or "n/a") + f" ({gpus} GPU{'s' if gpus > 1 else ''}, batch {batch})"


def _progress(lane_id: str, rows: list[dict[str, str]], assets: Path) -> Figure:
    """The lane's progress plot (experiment number vs primary metric)."""
    points = [_plots().Point(i, r["status"], _float(r["candidate"])) for i, r in enumerate(rows)]
    metric = next((r["metric"] for r in rows if r["metric"]), "metric")
    png = _plots().progress(points, metric, f"{lane_id}: {metric} per experiment",
                            assets / f"progress-{_slug(lane_id)}.png")
    return _figure(png, f"progress of lane {lane_id}")


# -- stage attribution --------------------------------------------------------------------------

def _stage_ms(stages: Any) -> dict[str, float]:
    """Stage name -> ms from the shapes a profile may use: numbers, {ms|mean_ms|...}, or a list of records."""
    if isinstance(stages, list):
        stages = {str(s.get("name", i)): s for i, s in enumerate(stages) if isinstance(s, dict)}
    if not isinstance(stages, dict):
        return {}
    out = {}
    for name, value in stages.items():
        if isinstance(value, dict):
            value = next((value[k] for k in ("ms", "median_ms", "mean_ms", "total_ms") if k in value), None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[str(name)] = float(value)
    return out


def _latest_profile(paths: StatePaths, lane_id: str) -> tuple[Path, dict[str, Any]] | None:
    """The newest runs/profile-*/profile.json of this lane (or naming no lane), with its contents."""
    for path in sorted(paths.runs.glob("profile-*/profile.json"), key=lambda p: p.stat().st_mtime, reverse=True):
        data = _read(path)
        if data.get("lane_id", lane_id) == lane_id:
            return path, data
    return None


def _profile(paths: StatePaths, lane_id: str, assets: Path) -> ProfileView:
    """Stage-attribution bars, headline figures and top ops of the lane's latest profile, or what is missing."""
    found = _latest_profile(paths, lane_id)
    if found is None:
        return ProfileView(found=False)
    path, data = found
    summary = data.get("summary") if isinstance(data.get("summary"), dict) else {}
    stages = _stage_ms(data.get("stages") or summary.get("stage_ms") or data.get("stage_ms"))
    where = f"{path.parent.name}" + (f", commit {str(data['commit'])[:10]}" if data.get("commit") else "")
    if not stages:
        return ProfileView(found=True, where=where)
    png = _plots().stages(stages, f"stage attribution ({where})", assets / f"profile-{_slug(lane_id)}.png")
    facts = [[k, v] for k in PROFILE_FACTS if isinstance(v := data.get(k, summary.get(k)), (str, int, float))]
    ops = [op for op in summary.get("top_ops") or [] if isinstance(op, dict)][:10]
    return ProfileView(
        found=True, where=where, figure=_figure(png, "stage attribution"),
        facts=_table(["profile", "value"], facts) if facts else None,
        ops=_table(["self ms", "calls", "top op"], [[op.get("self_ms"), op.get("calls"), str(op.get("name"))[:120]]
                                                   for op in ops]) if ops else None)


# -- one run ------------------------------------------------------------------------------------

def _worst_cases(quality: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The WORST_CASES cases furthest from the baseline (lowest PSNR, then highest latent error)."""
    cases = [(cid, v) for cid, v in (quality.get("per_case") or {}).items() if isinstance(v, dict)]

    def key(item: tuple[str, dict[str, Any]]) -> tuple[float, float]:
        """Sort key: PSNR ascending, then latent error descending."""
        fid = item[1].get("fidelity") or {}
        return (float(fid.get("psnr_db", math.inf)), -float(fid.get("latent_rel_l2", 0.0)))

    return sorted(cases, key=key)[:WORST_CASES]


def _worst_table(worst: list[tuple[str, dict[str, Any]]]) -> Table:
    """The worst cases' fidelity and failed checks."""
    rows = [[cid] + [(v.get("fidelity") or {}).get(c) for c in FIDELITY_COLUMNS]
            + [", ".join(ch.get("name", "") for ch in v.get("checks") or [] if not ch.get("passed"))]
            for cid, v in worst]
    return _table(["worst case"] + list(FIDELITY_COLUMNS) + ["failed checks"], rows)


def _quality(run_dir: Path, lane_id: str, paths: StatePaths, assets: Path, shown: tuple[str, ...]) -> QualityView:
    """Class audit, failed checks not already in `shown`, the worst cases' fidelity and their images."""
    quality = _read(run_dir / "quality.json")
    if not quality:
        return QualityView(found=False)
    failures = quality.get("failures") or []
    worst = _worst_cases(quality)
    images = None
    if worst and not math.isinf(float((worst[0][1].get("fidelity") or {}).get("psnr_db", 0.0))):
        images = _case_images(run_dir, [cid for cid, _ in worst], paths.baseline(lane_id) / "cases", assets)
    return QualityView(found=True, declared=fmt(quality.get("declared_class")),
                       effective=fmt(quality.get("effective_class")),
                       audit="; ".join(quality.get("audit_reasons") or []), failed_count=len(failures),
                       more_failures=tuple(fmt(f) for f in failures if f not in shown)[:10],
                       worst=_worst_table(worst) if worst else None, images=images)


def _case_images(run_dir: Path, case_ids: list[str], baseline_cases: Path, assets: Path) -> CaseImages:
    """The run's own worst_cases.png, else a baseline | candidate | diff grid from the images that exist."""
    prefix = _slug(run_dir.name)
    if (run_dir / "worst_cases.png").is_file():
        dest = assets / f"{prefix}-worst_cases.png"
        shutil.copyfile(run_dir / "worst_cases.png", dest)
        return CaseImages(_figure(dest, "worst cases"), candidates_missing=False, baseline_missing=False)
    grid = [(cid, baseline_cases / f"{cid}.png", run_dir / "cases" / f"{cid}.png") for cid in case_ids]
    grid = [(cid, b, c if c.is_file() else None) for cid, b, c in grid if b.is_file()]
    figure = None
    if grid:
        figure = _figure(_plots().image_grid(grid, assets / f"{prefix}-cases.png"),
                         "baseline vs candidate, worst cases")
    return CaseImages(figure, candidates_missing=not grid or all(c is None for _, _, c in grid),
                      baseline_missing=not grid)


def _segment_table(perf: dict[str, Any], parts: list[dict[str, Any]]) -> Table:
    """The sequential test's look after each segment, or the per-block stats of runs made before it."""
    if "segments" in perf:
        return _table(["segment"] + list(LOOK_COLUMNS) + ["divergence"],
                      [[p.get("index", i) + 1] + [(p.get("look") or {}).get(c) for c in LOOK_COLUMNS]
                       + [p.get("divergence")] for i, p in enumerate(parts)])
    return _table(["block"] + list(BLOCK_COLUMNS) + ["divergence"],
                  [[p.get("index", i) + 1] + [(p.get("stats") or {}).get(c) for c in BLOCK_COLUMNS]
                   + [p.get("divergence")] for i, p in enumerate(parts)])


def _perf(run_dir: Path, assets: Path) -> PerfView:
    """Timing distribution plot and the sequential test's look after each segment (perf.json)."""
    perf = _read(run_dir / "perf.json")
    timing = _read(run_dir / "baseline.json").get("timing") or {}
    aa = timing.get("aa_segment") or timing.get("aa_block")
    if not perf and isinstance(aa, dict):
        perf = {"segments": [aa], "reasons": ["baseline A/A: both sides run the baseline (noise floor)"]}
    parts = [p for p in perf.get("segments") or perf.get("blocks") or [] if isinstance(p, dict)]
    if not parts:
        return PerfView(figure=None)
    png = _plots().timing(parts, assets / f"{_slug(run_dir.name)}-timing.png")
    seconds = perf.get("seconds") or {}
    return PerfView(figure=_figure(png, "timing distribution"), table=_segment_table(perf, parts),
                    wall_time=", ".join(f"{k} {fmt(v)} s" for k, v in seconds.items()),
                    reasons=tuple(fmt(r) for r in perf.get("reasons") or []))


def _run_line(row: dict[str, str]) -> str:
    """Commit, parent and the measured metric of a ledger row, leaving out what is empty."""
    parts = [f"commit {row.get('commit', '')[:12]}" + (f" on {row['parent'][:12]}" if row.get("parent") else "")]
    if row.get("candidate"):
        parts.append(f"{row.get('metric')} {row['candidate']}" +
                     (f" vs best {row['best_before']}" if row.get("best_before") else ""))
    if row.get("improvement_pct"):
        p_value = f", p={row['p_value']}" if row.get("p_value") else ""
        parts.append(f"improvement {row['improvement_pct']} %{p_value}")
    if row.get("declared_class") and row.get("effective_class") not in ("", row["declared_class"]):
        parts.append(f"class {row.get('declared_class')} raised to {row['effective_class']}")
    return "; ".join(parts)


def run_view(row: dict[str, str], root: Path, paths: StatePaths, assets: Path) -> RunView:
    """Everything one run left behind: verdict, reasons, crash, quality and timing (figures written to assets)."""
    run_dir = root / row["run_dir"] if row.get("run_dir") else paths.run(row["run_id"])
    status = row.get("status", "")
    reasons = tuple(fmt(r) for r in _read(run_dir / "experiment.json").get("reasons") or [])
    head = RunView(run_id=row["run_id"], status=status, description=fmt(row.get("description")),
                   line=_run_line(row), reasons=reasons, run_dir=fmt(row.get("run_dir")))
    if not run_dir.is_dir():
        where = run_dir.relative_to(root) if run_dir.is_relative_to(root) else run_dir
        return replace(head, missing_folder=str(where))
    crash = run_dir / "crash.txt"
    return replace(
        head, crash=crash.read_text(encoding="utf-8", errors="replace")[:3000] if crash.is_file() else None,
        quality=None if status == "baseline" else _quality(run_dir, row.get("lane", ""), paths, assets, reasons),
        perf=_perf(run_dir, assets), logs=tuple(sorted(p.name for p in run_dir.glob("*.log"))))


def current_session(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """One lane's rows from its latest baseline on (earlier sessions stay in the ledger table)."""
    starts = [i for i, r in enumerate(rows) if r["status"] == "baseline"]
    return rows[starts[-1]:] if starts else rows


def ledger_view(rows: list[dict[str, str]]) -> Table | None:
    """The ledger with every column, rows coloured by status; None when there are no rows."""
    if not rows:
        return None
    return _table(list(ledger.COLUMNS), [[r[c] for c in ledger.COLUMNS] for r in rows],
                  [f"s-{r['status']}" for r in rows], css="ledger")


# -- pages --------------------------------------------------------------------------------------

def _prepare(out: Path) -> Path:
    """Create the output folder and an emptied assets folder (only our own PNGs are removed)."""
    assets = out / ASSETS
    assets.mkdir(parents=True, exist_ok=True)
    for old in assets.glob("*.png"):
        old.unlink()
    return assets


def _context(config_path: Path) -> ReportContext:
    """Root, state paths, session and target name; read-only, so a lane need not run here nor the config validate."""
    config_path = Path(config_path)
    if not config_path.is_file():
        raise Refused(f"{config_path} does not exist: pass the session's --config (the report is written beside it)")
    root = repo_root_for(config_path)
    paths = StatePaths(root)
    target = (_read(config_path).get("target") or {}).get("name")
    return ReportContext(root=root, paths=paths, session=_read(paths.session), best=_read(paths.best),
                         target_name=target or "the target device")


def _lane_section(lane_id: str, rows: list[dict[str, str]], ctx: ReportContext, assets: Path) -> LaneSection:
    """One lane of the session page: header, progress, profile and its newest runs."""
    mine = current_session([r for r in rows if r["lane"] == lane_id])
    return LaneSection(header=_header(lane_id, mine, ctx), progress=_progress(lane_id, mine, assets),
                       profile=_profile(ctx.paths, lane_id, assets),
                       runs=tuple(run_view(r, ctx.root, ctx.paths, assets) for r in reversed(mine[-MAX_RUNS:])))


def session_report(config_path: Path, out: Path | None = None) -> Path:
    """The session page: per lane the header, progress, profile, runs and ledger; returns index.html."""
    ctx = _context(config_path)
    out = out or ctx.paths.dir / "report"
    assets = _prepare(out)
    rows = _rows(ctx.paths.ledger)
    session_lane = [ctx.session["lane_id"]] if ctx.session.get("lane_id") else []
    lanes = list(dict.fromkeys([r["lane"] for r in rows] + session_lane))
    page = SessionPage(title=f"dit-ar report: session {ctx.session.get('tag', '?')}", state_dir=str(ctx.paths.dir),
                       row_count=len(rows), lanes=tuple(_lane_section(lane, rows, ctx, assets) for lane in lanes),
                       ledger=ledger_view(rows), summary=SUMMARY_FILE, warnings=_warnings(ctx, lanes))
    (out / SUMMARY_FILE).write_text(summary.markdown(ctx.root, ctx.session.get("lane_id")), encoding="utf-8")
    return _render("session.html", page, out / "index.html")


SUMMARY_FILE = "summary.md"


def _warnings(ctx: ReportContext, lanes: list[str]) -> tuple[str, ...]:
    """Each lane's latest re-validation warning (the chain measured again disagrees with its steps)."""
    rows = ledger.read(ctx.paths.ledger)
    found = (summary.revalidation_warning(ctx.root, summary.session_rows(rows, lane)) for lane in lanes)
    return tuple(f"{lane}: {w}" for lane, w in zip(lanes, found) if w)


def _run_row(paths: StatePaths, run_id: str, rows: list[dict[str, str]]) -> dict[str, str]:
    """The run's last ledger row, else one made from its experiment.json."""
    if rows:
        return rows[-1]
    record = _read(paths.run(run_id) / "experiment.json")
    return {c: str(record.get(c) or "") for c in ledger.COLUMNS} | {"run_id": run_id}


def run_report(config_path: Path, run_id: str, out: Path | None = None) -> Path:
    """One run's page (runs/<id>/report.html by default); returns its path."""
    if Path(run_id).name != run_id or run_id in ("", ".", ".."):
        raise Refused(f"{run_id!r} is not a run id (a folder name under .autoresearch/runs/)")
    ctx = _context(config_path)
    all_rows = _rows(ctx.paths.ledger)
    rows = [r for r in all_rows if r["run_id"] == run_id]
    run_dir = ctx.paths.run(run_id)
    if not rows and not run_dir.is_dir():
        raise Refused(f"no run {run_id!r} in the ledger or in {ctx.paths.runs}")
    row = _run_row(ctx.paths, run_id, rows)
    out = out or run_dir
    assets = _prepare(out)
    lane_id = row.get("lane") or ctx.session.get("lane_id", "")
    lane_rows = current_session([r for r in all_rows if r["lane"] == lane_id])
    page = RunPage(title=f"dit-ar report: run {run_id}", header=_header(lane_id, lane_rows, ctx),
                   run=run_view(row, ctx.root, ctx.paths, assets), ledger=ledger_view(rows))
    return _render("run.html", page, out / "report.html")
