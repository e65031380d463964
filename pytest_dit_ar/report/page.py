"""`dit-ar report`: a static HTML page with PNG figures of the session, or of one run.

The page is self-contained: every figure is written next to it under `report_files/` and linked
relatively, so the folder can be copied anywhere. The report only reads the state directory.
"""

from __future__ import annotations

import html
import math
import shutil
from pathlib import Path
from typing import Any

from dit_ar_contract.config import repo_root_for
from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status

from ..state import ledger
from ..state.files import read_json_object
from ..state.paths import StatePaths

ASSETS = "report_files"
WORST_CASES = 4
MAX_RUNS = 30  # runs shown in detail on the session page (newest first); `--run ID` shows any run
FIDELITY_COLUMNS = ("psnr_db", "ssim", "latent_rel_l2", "latent_max_abs")
BLOCK_COLUMNS = ("rounds", "best_median_ms", "cand_median_ms", "best_p95_ms", "cand_p95_ms", "median_ratio",
                 "ci_upper_ratio", "improvement_pct", "p_value", "passes")  # runs made before the sequential test
LOOK_COLUMNS = ("rounds", "estimate_pct", "lower_pct", "upper_pct", "z", "boundary", "decision")
CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{margin-bottom:4px} h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:36px}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
.wide{overflow-x:auto} .ledger td,.ledger th{white-space:nowrap}
th{background:#f2f2f2} .meta td:first-child{font-weight:600;background:#fafafa}
.note{color:#666;font-style:italic} .run{border-left:6px solid #ccc;padding-left:12px;margin:18px 0}
img{max-width:100%;border:1px solid #eee;margin:4px 0} pre{background:#f6f6f6;padding:8px;overflow-x:auto}
""" + "".join(f"tr.s-{s}{{background:{c}22}} .run.s-{s}{{border-left-color:{c}}}\n"
              for s, c in ((st.word, st.colour) for st in Status)) + "".join(
    f".ledger td:nth-child({ledger.COLUMNS.index(c) + 1}){{white-space:normal;min-width:32ch}}\n"
    for c in ("quality_summary", "description"))


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


def esc(value: Any) -> str:
    """A value as escaped HTML text."""
    return html.escape(fmt(value))


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


def _table(header: list[str], rows: list[list[Any]], row_classes: list[str] | None = None, cls: str = "") -> str:
    """An HTML table; every cell escaped."""
    classes = row_classes or [""] * len(rows)
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join(f'<tr class="{esc(rc)}">' + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>"
                   for rc, row in zip(classes, rows))
    return f'<table class="{esc(cls)}"><tr>{head}</tr>{body}</table>'


def _img(png: Path, alt: str) -> str:
    """An img tag for a figure in the assets folder, linked relative to the page."""
    return f'<img src="{esc(f"{ASSETS}/{png.name}")}" alt="{esc(alt)}">'


def _slug(text: str) -> str:
    """A file-name-safe form of a lane or run id."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


# -- header -----------------------------------------------------------------------------------

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


def _header(lane_id: str, rows: list[dict[str, str]], ctx: dict[str, Any]) -> str:
    """The lane's summary table: device, best commit, baseline metrics, noise floor, counts."""
    paths: StatePaths = ctx["paths"]
    baseline = _read(paths.baseline(lane_id) / "baseline.json")
    best = ctx["best"].get(lane_id) or {}
    timing = baseline.get("timing") or {}
    interval = timing.get("noise_interval_pct") or timing.get("noise_ci_ratio") or []  # the latter: older runs
    counts = ", ".join(f"{s.word}={n}" for s in Status if (n := sum(r["status"] == s.word for r in rows)))
    meta = [
        ("lane", lane_id),
        ("device", device_label(lane_id, ctx["session"], baseline, ctx["target_name"])),
        ("session", f"{ctx['session'].get('tag')} (branch {ctx['session'].get('branch')})"
         if ctx["session"].get("lane_id") == lane_id else "not the current session's lane"),
        ("best commit", f"{str(best.get('commit', 'none'))[:12]} (run {best.get('run_id', '-')}) " +
         ", ".join(f"{k}={fmt(v)}" for k, v in (best.get("measurements") or {}).items())),
        ("baseline commit", str(baseline.get("commit", "no baseline yet"))[:12]),
        ("baseline latency", f"median {_or_na(timing.get('median_ms'))} ms, p95 {_or_na(timing.get('p95_ms'))} ms "
                             "per batch"),
        ("noise floor (A/A)", f"{_or_na(timing.get('noise_floor_pct'))} % between two fresh processes of the "
                              f"baseline, interval [{', '.join(fmt(x) for x in interval)}]"),
        ("baseline task metrics", ", ".join(f"{k}={fmt(v)}" for k, v in (baseline.get("task_metrics") or {}).items())
         or "none"),
        ("quality noise envelope", ", ".join(f"{k}={fmt(v)}" for k, v in (baseline.get("envelope") or {}).items())
         or "none"),
        ("ledger rows", counts or "none"),
    ]
    cells = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in meta)
    return f'<table class="meta">{cells}</table>'


def _progress(lane_id: str, rows: list[dict[str, str]], assets: Path) -> str:
    """The lane's progress plot (experiment number vs primary metric)."""
    points = [_plots().Point(i, r["status"], _float(r["candidate"])) for i, r in enumerate(rows)]
    metric = next((r["metric"] for r in rows if r["metric"]), "metric")
    png = _plots().progress(points, metric, f"{lane_id}: {metric} per experiment",
                         assets / f"progress-{_slug(lane_id)}.png")
    return _img(png, f"progress of lane {lane_id}")


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


def _profile(paths: StatePaths, lane_id: str, assets: Path) -> str:
    """Stage-attribution bars, headline figures and top ops of the lane's latest profile, or a note."""
    found = _latest_profile(paths, lane_id)
    if found is None:
        return '<p class="note">no profile of this lane yet (run <code>dit-ar profile</code>).</p>'
    path, data = found
    summary = data.get("summary") if isinstance(data.get("summary"), dict) else {}
    stages = _stage_ms(data.get("stages") or summary.get("stage_ms") or data.get("stage_ms"))
    where = f"{path.parent.name}" + (f", commit {str(data['commit'])[:10]}" if data.get("commit") else "")
    if not stages:
        return f'<p class="note">{esc(where)}: profile.json has no stage times.</p>'
    png = _plots().stages(stages, f"stage attribution ({where})", assets / f"profile-{_slug(lane_id)}.png")
    keys = ("device", "batch", "steps", "stage_basis", "total_ms", "median_plain_ms", "denoise_per_step_ms",
            "achieved_tflops", "percent_of_peak", "roofline_ms")
    facts = [[k, v] for k in keys if isinstance(v := data.get(k, summary.get(k)), (str, int, float))]
    ops = [op for op in summary.get("top_ops") or [] if isinstance(op, dict)][:10]
    return (_img(png, "stage attribution") + (_table(["profile", "value"], facts) if facts else "")
            + (_table(["self ms", "calls", "top op"], [[op.get("self_ms"), op.get("calls"), str(op.get("name"))[:120]]
                                                      for op in ops]) if ops else ""))


# -- one run ------------------------------------------------------------------------------------

def _worst_cases(quality: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The WORST_CASES cases furthest from the baseline (lowest PSNR, then highest latent error)."""
    cases = [(cid, v) for cid, v in (quality.get("per_case") or {}).items() if isinstance(v, dict)]

    def key(item: tuple[str, dict[str, Any]]) -> tuple[float, float]:
        """Sort key: PSNR ascending, then latent error descending."""
        fid = item[1].get("fidelity") or {}
        return (float(fid.get("psnr_db", math.inf)), -float(fid.get("latent_rel_l2", 0.0)))

    return sorted(cases, key=key)[:WORST_CASES]


def _quality(run_dir: Path, lane_id: str, paths: StatePaths, assets: Path, shown: list[str]) -> str:
    """Class audit, failed checks not already in `shown`, the worst cases' fidelity and their images."""
    quality = _read(run_dir / "quality.json")
    if not quality:
        return '<p class="note">no quality.json in this run.</p>'
    failures = quality.get("failures") or []
    parts = [f"<p>class declared {esc(quality.get('declared_class'))}, effective "
             f"{esc(quality.get('effective_class'))}. {esc('; '.join(quality.get('audit_reasons') or []))} "
             f"{len(failures)} checks failed.</p>"]
    more = [f for f in failures if f not in shown][:10]
    if more:
        parts.append("<ul>" + "".join(f"<li>{esc(f)}</li>" for f in more) + "</ul>")
    worst = _worst_cases(quality)
    if not worst:
        return "".join(parts)
    rows = [[cid] + [(v.get("fidelity") or {}).get(c) for c in FIDELITY_COLUMNS]
            + [", ".join(ch.get("name", "") for ch in v.get("checks") or [] if not ch.get("passed"))]
            for cid, v in worst]
    parts.append(_table(["worst case"] + list(FIDELITY_COLUMNS) + ["failed checks"], rows))
    if math.isinf(float((worst[0][1].get("fidelity") or {}).get("psnr_db", 0.0))):
        parts.append('<p class="note">every case is pixel-identical to the baseline (PSNR inf): no images shown.</p>')
    else:
        parts.append(_case_images(run_dir, [cid for cid, _ in worst], paths.baseline(lane_id) / "cases", assets))
    return "".join(parts)


def _case_images(run_dir: Path, case_ids: list[str], baseline_cases: Path, assets: Path) -> str:
    """The run's own worst_cases.png, else a baseline | candidate | diff grid from the images that exist."""
    prefix = _slug(run_dir.name)
    if (run_dir / "worst_cases.png").is_file():
        dest = assets / f"{prefix}-worst_cases.png"
        shutil.copyfile(run_dir / "worst_cases.png", dest)
        return _img(dest, "worst cases")
    grid = [(cid, baseline_cases / f"{cid}.png", run_dir / "cases" / f"{cid}.png") for cid in case_ids]
    grid = [(cid, b, c if c.is_file() else None) for cid, b, c in grid if b.is_file()]
    html_ = ""
    if grid:
        html_ = _img(_plots().image_grid(grid, assets / f"{prefix}-cases.png"), "baseline vs candidate, worst cases")
    if not grid or all(c is None for _, _, c in grid):
        html_ += ('<p class="note">candidate images are not stored for this run'
                  + ("" if grid else " and the baseline images are missing") + ".</p>")
    return html_


def _perf(run_dir: Path, assets: Path) -> str:
    """Timing distribution plot and the sequential test's look after each segment (perf.json)."""
    perf = _read(run_dir / "perf.json")
    timing = _read(run_dir / "baseline.json").get("timing") or {}
    aa = timing.get("aa_segment") or timing.get("aa_block")
    if not perf and isinstance(aa, dict):
        perf = {"segments": [aa], "reasons": ["baseline A/A: both sides run the baseline (noise floor)"]}
    parts = [p for p in perf.get("segments") or perf.get("blocks") or [] if isinstance(p, dict)]
    if not parts:
        return '<p class="note">no timing in this run (perf.json absent: the run stopped before timing).</p>'
    png = _plots().timing(parts, assets / f"{_slug(run_dir.name)}-timing.png")
    if "segments" in perf:
        table = _table(["segment"] + list(LOOK_COLUMNS) + ["divergence"],
                       [[p.get("index", i) + 1] + [(p.get("look") or {}).get(c) for c in LOOK_COLUMNS]
                        + [p.get("divergence")] for i, p in enumerate(parts)])
    else:
        table = _table(["block"] + list(BLOCK_COLUMNS) + ["divergence"],
                       [[p.get("index", i) + 1] + [(p.get("stats") or {}).get(c) for c in BLOCK_COLUMNS]
                        + [p.get("divergence")] for i, p in enumerate(parts)])
    seconds = perf.get("seconds") or {}
    spent = ", ".join(f"{k} {fmt(v)} s" for k, v in seconds.items())
    where = f"<p>wall time: {esc(spent)}</p>" if spent else ""
    reasons = "".join(f"<li>{esc(r)}</li>" for r in perf.get("reasons") or [])
    return _img(png, "timing distribution") + table + where + (f"<ul>{reasons}</ul>" if reasons else "")


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


def run_section(row: dict[str, str], root: Path, paths: StatePaths, assets: Path) -> str:
    """Everything one run left behind: verdict, reasons, crash, quality and timing."""
    run_dir = root / row["run_dir"] if row.get("run_dir") else paths.run(row["run_id"])
    record = _read(run_dir / "experiment.json")
    status = row.get("status", "")
    parts = [f'<div class="run s-{esc(status)}" id="run-{esc(row["run_id"])}">',
             f"<h3>{esc(row['run_id'])}: {esc(status.upper())} — {esc(row.get('description'))}</h3>",
             f"<p>{esc(_run_line(row))}</p>"]
    reasons = record.get("reasons") or []
    if reasons:
        parts.append("<ul>" + "".join(f"<li>{esc(r)}</li>" for r in reasons) + "</ul>")
    if not run_dir.is_dir():
        where = run_dir.relative_to(root) if run_dir.is_relative_to(root) else run_dir
        parts.append(f'<p class="note">run folder {esc(where)} is missing.</p></div>')
        return "".join(parts)
    crash = run_dir / "crash.txt"
    if crash.is_file():
        parts.append(f"<pre>{esc(crash.read_text(encoding='utf-8', errors='replace')[:3000])}</pre>")
    if status != "baseline":
        parts.append("<h4>quality</h4>" + _quality(run_dir, row.get("lane", ""), paths, assets, reasons))
    parts.append("<h4>timing</h4>" + _perf(run_dir, assets))
    logs = sorted(p.name for p in run_dir.glob("*.log"))
    if logs:
        parts.append(f'<p class="note">worker logs in {esc(row.get("run_dir"))}: {esc(", ".join(logs))}</p>')
    return "".join(parts) + "</div>"


def current_session(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """One lane's rows from its latest baseline on (earlier sessions stay in the ledger table)."""
    starts = [i for i, r in enumerate(rows) if r["status"] == "baseline"]
    return rows[starts[-1]:] if starts else rows


def ledger_table(rows: list[dict[str, str]]) -> str:
    """The ledger with every column, rows coloured by status."""
    table = _table(list(ledger.COLUMNS), [[r[c] for c in ledger.COLUMNS] for r in rows],
                   [f"s-{r['status']}" for r in rows], cls="ledger")
    return f'<div class="wide">{table}</div>'


# -- pages --------------------------------------------------------------------------------------

def _page(title: str, body: str) -> str:
    """A whole HTML document."""
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1>{body}</body></html>\n")


def _prepare(out: Path) -> Path:
    """Create the output folder and an emptied assets folder (only our own PNGs are removed)."""
    assets = out / ASSETS
    assets.mkdir(parents=True, exist_ok=True)
    for old in assets.glob("*.png"):
        old.unlink()
    return assets


def _context(config_path: Path) -> dict[str, Any]:
    """Root, state paths, session and target name; read-only, so a lane need not run here nor the config validate."""
    config_path = Path(config_path)
    if not config_path.is_file():
        raise Refused(f"{config_path} does not exist: pass the session's --config (the report is written beside it)")
    root = repo_root_for(config_path)
    paths = StatePaths(root)
    target = (_read(config_path).get("target") or {}).get("name")
    return {"root": root, "paths": paths, "session": _read(paths.session), "best": _read(paths.best),
            "target_name": target or "the target device"}


def session_report(config_path: Path, out: Path | None = None) -> Path:
    """The session page: per lane the header, progress, profile, runs and ledger; returns index.html."""
    ctx = _context(config_path)
    paths: StatePaths = ctx["paths"]
    out = out or paths.dir / "report"
    assets = _prepare(out)
    rows = _rows(paths.ledger)
    lanes = list(dict.fromkeys([r["lane"] for r in rows] + ([ctx["session"]["lane_id"]]
                                                           if ctx["session"].get("lane_id") else [])))
    body = [f"<p>state {esc(paths.dir)}; {len(rows)} ledger rows. Every figure is in {ASSETS}/.</p>"]
    if not lanes:
        body.append('<p class="note">no session and no ledger rows yet: run <code>dit-ar init</code> and '
                    "<code>dit-ar baseline</code>.</p>")
    for lane_id in lanes:
        mine = current_session([r for r in rows if r["lane"] == lane_id])
        body += [f"<h2>lane {esc(lane_id)}</h2>", _header(lane_id, mine, ctx), _progress(lane_id, mine, assets)]
        body += ["<h3>stage attribution</h3>", _profile(paths, lane_id, assets)]
        body.append(f"<h3>runs (newest first, at most {MAX_RUNS})</h3>")
        body += [run_section(r, ctx["root"], paths, assets) for r in reversed(mine[-MAX_RUNS:])] or \
            ['<p class="note">no runs yet.</p>']
    body += ["<h2>ledger</h2>", ledger_table(rows) if rows else '<p class="note">the ledger is empty.</p>']
    page = out / "index.html"
    page.write_text(_page(f"dit-ar report: session {ctx['session'].get('tag', '?')}", "".join(body)), encoding="utf-8")
    return page


def run_report(config_path: Path, run_id: str, out: Path | None = None) -> Path:
    """One run's page (runs/<id>/report.html by default); returns its path."""
    if Path(run_id).name != run_id or run_id in ("", ".", ".."):
        raise Refused(f"{run_id!r} is not a run id (a folder name under .autoresearch/runs/)")
    ctx = _context(config_path)
    paths: StatePaths = ctx["paths"]
    all_rows = _rows(paths.ledger)
    rows = [r for r in all_rows if r["run_id"] == run_id]
    run_dir = paths.run(run_id)
    if not rows and not run_dir.is_dir():
        raise Refused(f"no run {run_id!r} in the ledger or in {paths.runs}")
    if rows:
        row = rows[-1]
    else:
        record = _read(run_dir / "experiment.json")
        row = {c: str(record.get(c) or "") for c in ledger.COLUMNS} | {"run_id": run_id}
    out = out or run_dir
    assets = _prepare(out)
    lane_id = row.get("lane") or ctx["session"].get("lane_id", "")
    lane_rows = current_session([r for r in all_rows if r["lane"] == lane_id])
    no_row = '<p class="note">this run has no ledger row.</p>'
    body = (f"<h2>lane {esc(lane_id)}</h2>{_header(lane_id, lane_rows, ctx)}"
            f"{run_section(row, ctx['root'], paths, assets)}<h2>ledger row</h2>"
            f"{ledger_table(rows) if rows else no_row}")
    page = out / "report.html"
    page.write_text(_page(f"dit-ar report: run {run_id}", body), encoding="utf-8")
    return page
