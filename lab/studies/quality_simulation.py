"""The task-score gate's error rates over many simulated sessions, from per-case scores recorded on the embedded lane.

    python -m lab.studies.quality_simulation --sessions 10000 --sessions-model iid
                                             [--data lab/data/cpu/quality/pool.npz] [--alpha 0.05]
                                             [--boundary-sessions N] [--floor-quantile Q] [--rows TEXT]
                                             [--out lab/data/cpu/quality/simulation-iid.json]

The data are `lab/studies/quality_record.py`'s pool: 20 blocks of the 40-case corpus under their own seeds (800
cases), scored for the baseline, two harmless changes (a reversed-batch rerun, 8-bit images), the demo's int8 and
half-step changes, and blends calibrated to 0.5, 1, 2 and 5 times each metric's margin (approximate) or resolution
(quantization). Every row judges the judge's per-case test of one class with the product's own function,
`quality_suite.task_tests.judge_case_scores`, on the session's 200 cases (looks at 40, 80, 160, 200 as the gate's),
and counts the sessions that pass. The Frechet distance is reported, not gated, so it has no rows.

Session models (`--sessions-model`):
* iid: 200 cases drawn with replacement from the 800 (the pool taken as the population: independent sessions);
* blocks: 5 of the 20 blocks in a random order (sessions share the one pool's cases; the earlier study's model).

Each session's baseline figures are measured on the session's own cases, as the product's baseline measures them
on its cases (quality_suite/margin_spread.py): the spread floor from the pool's blend at 1 x the row's margin, tau_q
from the 8-bit images. Rows marked "independent baseline" take both from another draw of 200 cases instead. All
rows of a run share the same session draws (common random numbers).

Rows beyond the pool's own variants (the cases chosen at random with a fixed seed):
* concentrated k x (approximate): cases scored 0, enough for the pool's mean loss to be k x the margin;
* semi-concentrated: the blend at k x on a random 1/k of the cases, the rest untouched;
* ruin r (quantization): a share r of the cases scored 0 (rounded up to whole cases of the 800), the rest
  untouched; r includes p0 and 2 p0 of the tolerance claim. Rows at p0 sit on the claim's boundary (their pass rate
  is (1 - r)^200 by construction) and run `--boundary-sessions` sessions.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dit_ar_contract.classes import ChangeClass
from dit_ar_contract.config import QualityContract, load_config
from quality_suite import case_rules, margin_spread, task_tests
from quality_suite.calibration import PassRate
from quality_suite.corpora import load_corpus
from quality_suite.noninferiority import Decision

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "lab" / "data" / "cpu" / "quality" / "pool.npz"
METRIC = "judge_accuracy"
SIZES = (0.5, 1.0, 2.0, 5.0)
CASES = 200  # the embedded lane's case budget (5 x the 40-case corpus)
APPROXIMATE, QUANTIZATION = ChangeClass.APPROXIMATE, ChangeClass.QUANTIZATION


@dataclass(frozen=True)
class Pool:
    """The recorded pool of one metric: every variant's per-case scores, the prompts (bootstrap strata)."""

    scores: dict[str, np.ndarray]
    prompts: np.ndarray
    corpus: int
    task_base: float
    resolution: float

    @property
    def base(self) -> np.ndarray:
        return self.scores["base"]


@dataclass(frozen=True)
class Row:
    cls: ChangeClass
    change: str
    cand: np.ndarray
    size: float | None = None  # of the margin (approximate) or the resolution (quantization)
    independent: bool = False  # the baseline's figures from another draw of cases
    boundary: bool = False  # on the claim's boundary: more sessions
    note: str = ""


def load(path: Path, metric: str = METRIC) -> Pool:
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(str(arrays.pop("meta")))
    corpus = int(meta["corpus"])
    lane = load_config(ROOT / "config" / "autoresearch.json").lanes["embedded-cpu"]
    prompts = [c.prompt for c in load_corpus(ROOT / lane.corpus)]
    order = np.array([prompts[i % corpus] for i in range(len(arrays["ids"]))])
    scores = {k.split("|")[0]: v.astype(np.float64) for k, v in arrays.items() if k.endswith(f"|{metric}")}
    return Pool(scores, order, corpus, float(meta["task_base"][metric]), float(meta["resolution"][metric]))


def ruined(pool: Pool, share: float, seed: int) -> np.ndarray:
    """A share of the cases (rounded up, chosen at random) scored 0, the rest untouched."""
    cand = pool.base.copy()
    count = math.ceil(share * len(cand) - 1e-9)
    cand[np.random.default_rng(seed).permutation(len(cand))[:count]] = 0.0
    return cand


def concentrated(pool: Pool, target: float, seed: int = 38) -> np.ndarray:
    """Cases chosen at random scored 0, enough of them for the pool's mean loss to reach `target`."""
    base = pool.base
    order = np.random.default_rng(seed).permutation(len(base))
    chosen = order[:int(np.searchsorted(np.cumsum(base[order]), target * len(base))) + 1]
    cand = base.copy()
    cand[chosen] = 0.0
    return cand


def semi(pool: Pool, variant: str, target: float, seed: int = 7) -> np.ndarray:
    """The blend `variant` on cases chosen at random (about 1/k of them for a blend at k x), enough of them for the
    pool's mean loss to reach `target`, the rest untouched."""
    base, blend = pool.base, pool.scores[variant]
    order = np.random.default_rng(seed).permutation(len(base))
    chosen = order[:int(np.searchsorted(np.cumsum((base - blend)[order]), target * len(base))) + 1]
    cand = base.copy()
    cand[chosen] = blend[chosen]
    return cand


def rows(pool: Pool, quality: QualityContract) -> list[Row]:
    margin = quality.approximate.task_margin[METRIC]
    n_pass = quality.noninferiority.tolerance_cases
    p0 = case_rules.p0(quality.noninferiority.alpha_q, n_pass)
    s = pool.scores
    out = [Row(APPROXIMATE, "harmless: reversed batches", s["rerun"]),
           Row(APPROXIMATE, "harmless: 8-bit images", s["8bit"]),
           Row(APPROXIMATE, "demo int8", s["int8"]), Row(APPROXIMATE, "demo half steps", s["half"])]
    for cls in (APPROXIMATE, QUANTIZATION):
        blend = f"blend-{METRIC}-{cls.word}"
        out += [Row(cls, f"blend {k:g} x", s[f"{blend}-{k:g}"], k) for k in SIZES]
        out += [Row(cls, "blend 1 x, independent baseline", s[f"{blend}-1"], 1.0, independent=True)]
        unit = margin if cls is APPROXIMATE else pool.resolution
        out += [Row(cls, f"blend {k:g} x on {100 / k:g}%", semi(pool, f"{blend}-{k:g}", unit), 1.0) for k in (2.0, 5.0)]
    out += [Row(APPROXIMATE, f"concentrated {k:g} x", concentrated(pool, k * margin), k) for k in SIZES]
    out += [Row(QUANTIZATION, "harmless: reversed batches", s["rerun"]),
            Row(QUANTIZATION, "harmless: 8-bit images", s["8bit"], note="sets tau_q: not a power row"),
            Row(QUANTIZATION, "harmless: 8-bit images, independent baseline", s["8bit"], independent=True),
            Row(QUANTIZATION, "demo int8", s["int8"]), Row(QUANTIZATION, "demo half steps", s["half"])]
    out += [Row(QUANTIZATION, f"ruin {100 * r:g}%", ruined(pool, r, 11)) for r in (0.001, 0.005, 0.01, 0.02, 0.04)]
    out += [Row(QUANTIZATION, "ruin p0", ruined(pool, p0, 11), boundary=True, note=f"p0 {100 * p0:.3g}%"),
            Row(QUANTIZATION, "ruin 2 p0", ruined(pool, 2 * p0, 11), note=f"2 p0 {200 * p0:.3g}%")]
    return out


def draws(model: str, pool: Pool, sessions: int, rng: np.random.Generator) -> np.ndarray:
    """[sessions, CASES] pool indices: iid with replacement, or 5 random blocks in a random order."""
    total = len(pool.base)
    if model == "iid":
        return rng.integers(0, total, (sessions, CASES))
    blocks = np.arange(total).reshape(-1, pool.corpus)
    per = -(-CASES // pool.corpus)
    return np.stack([blocks[rng.permutation(len(blocks))[:per]].reshape(-1)[:CASES] for _ in range(sessions)])


@dataclass
class Baselines:
    """Each session's baseline figures for one class, measured on given cases (the session's, or another draw)."""

    pool: Pool
    cls: ChangeClass
    quality: QualityContract
    idx: np.ndarray
    quantile: float = margin_spread.FLOOR_QUANTILE  # the floor's quantile (the product's unless explored)
    floors: np.ndarray | None = None
    points: np.ndarray | None = None
    taus: np.ndarray | None = None

    def measure(self) -> Baselines:
        m = task_tests.margins(self.cls, self.quality, {METRIC: self.pool.task_base},
                               {METRIC: self.pool.resolution})[METRIC][0]
        blend = self.pool.scores[f"blend-{METRIC}-{self.cls.word}-1"]
        floors, points, taus = [], [], []
        for idx in self.idx:
            point, floor = margin_spread.floor_of(self.pool.base[idx] - blend[idx], self.pool.prompts[idx], m,
                                                  self.quantile)
            loss = self.pool.base[idx] - self.pool.scores["8bit"][idx]
            taus.append(margin_spread.tolerance_of(loss, self.quality.exact.envelope_multiple,
                                                   self.pool.task_base).tolerance)
            floors.append(floor)
            points.append(point)
        self.floors, self.points, self.taus = np.array(floors), np.array(points), np.array(taus)
        return self

    def figures(self, i: int) -> task_tests.Figures:
        assert self.floors is not None and self.taus is not None
        source = task_tests.margins(self.cls, self.quality, {METRIC: self.pool.task_base},
                                    {METRIC: self.pool.resolution})[METRIC][1]
        return task_tests.Figures({METRIC: self.pool.task_base}, {METRIC: self.pool.resolution},
                                  {source: {METRIC: float(self.floors[i])}}, {METRIC: float(self.taus[i])})


def rate(row: Row, pool: Pool, quality: QualityContract, idx: np.ndarray, baselines: Baselines) -> PassRate:
    """The row's pass rate over the sessions `idx`, each judged by judge_case_scores with its baseline's figures."""
    passes, cases = 0, 0
    for i, case in enumerate(idx):
        pair = task_tests.Paired(pool.base[case], row.cand[case])
        judgement = task_tests.judge_case_scores(row.cls, {(METRIC, task_tests.BASELINE): pair}, quality,
                                                 baselines.figures(i), pool.corpus)
        passes += judgement.decision is Decision.PASS
        cases += judgement.cases
    return PassRate(passes, len(idx), cases / max(len(idx), 1))


def quantiles(values: np.ndarray) -> dict[str, float]:
    p5, p50, p95 = np.quantile(values, [0.05, 0.5, 0.95])
    return {"p5": float(p5), "median": float(p50), "p95": float(p95), "baselines": len(values)}


def floor_table(baselines: dict[ChangeClass, Baselines]) -> dict[str, dict]:
    """The floor's sampling distribution over the simulated baselines, per class (and the plain estimate's)."""
    out = {}
    for cls, b in baselines.items():
        assert b.floors is not None and b.points is not None and b.taus is not None
        out[cls.word] = {"floor": quantiles(b.floors), "point": quantiles(b.points), "tau_q": quantiles(b.taus),
                         "quantile": b.quantile, "resamples": margin_spread.FLOOR_RESAMPLES}
    return out


def machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores, load average {load} at the start"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--boundary-sessions", type=int, default=None, help="sessions of the rows at p0 (default: "
                    "--sessions)")
    ap.add_argument("--sessions-model", choices=("iid", "blocks"), default="iid")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--alpha", type=float, default=None, help="alpha_q (default: the config's)")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--rows", default="", help="only the rows whose change contains this text")
    ap.add_argument("--floor-quantile", type=float, default=margin_spread.FLOOR_QUANTILE,
                    help="the floor's bootstrap quantile (default: the product's; other values explore)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    started, date, where = time.perf_counter(), dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"), machine()
    quality = load_config(ROOT / "config" / "autoresearch.json").lanes["embedded-cpu"].quality
    if args.alpha is not None:
        quality = dataclasses.replace(quality, noninferiority=dataclasses.replace(quality.noninferiority,
                                                                                  alpha_q=args.alpha))
    pool = load(args.data)
    rng = np.random.default_rng(args.seed)
    idx, other = draws(args.sessions_model, pool, args.sessions, rng), draws(args.sessions_model, pool,
                                                                             args.sessions, rng)
    q = args.floor_quantile
    own = {cls: Baselines(pool, cls, quality, idx, q).measure() for cls in (APPROXIMATE, QUANTIZATION)}
    independent = {cls: Baselines(pool, cls, quality, other, q).measure() for cls in (APPROXIMATE, QUANTIZATION)}
    floors = floor_table(own)
    for cls, f in floors.items():
        print(f"{cls}: floor over {args.sessions} simulated baselines p5 {f['floor']['p5']:.3g}, median "
              f"{f['floor']['median']:.3g}, p95 {f['floor']['p95']:.3g} (plain estimate: median "
              f"{f['point']['median']:.3g}); tau_q median {f['tau_q']['median']:.3g}", flush=True)
    print(f"{'class':<12} {'change':<44} {'degradation':>11} {'margin':>9} {'passed':>7} {'[95% CI]':<16} cases")
    table = []
    for row in rows(pool, quality):
        if args.rows and args.rows not in row.change:
            continue
        t = time.perf_counter()
        baselines = (independent if row.independent else own)[row.cls]
        sessions_idx = idx
        if row.boundary and args.boundary_sessions and args.boundary_sessions != args.sessions:
            sessions_idx = draws(args.sessions_model, pool, args.boundary_sessions, rng)
            baselines = Baselines(pool, row.cls, quality, sessions_idx, q).measure()
        result = rate(row, pool, quality, sessions_idx, baselines)
        table.append(_record(row, pool, quality, result, time.perf_counter() - t))
        _print(table[-1])
    summary = {"sessions": args.sessions, "boundary_sessions": args.boundary_sessions or args.sessions,
               "sessions_model": args.sessions_model, "metric": METRIC,
               "alpha_q": quality.noninferiority.alpha_q, "tolerance_cases": quality.noninferiority.tolerance_cases,
               "p0": case_rules.p0(quality.noninferiority.alpha_q, quality.noninferiority.tolerance_cases),
               "floors": floors, "data": str(args.data.relative_to(ROOT) if args.data.is_relative_to(ROOT)
                                             else args.data),
               "command": "python -m lab.studies.quality_simulation " + " ".join(argv if argv is not None
                                                                                 else sys.argv[1:]),
               "date": date, "machine": where, "seconds": round(time.perf_counter() - started, 1), "rows": table}
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{args.sessions} sessions per row ({args.sessions_model}), alpha_q {quality.noninferiority.alpha_q}; "
          f"{summary['seconds']:.0f} s")
    return 0


def _record(row: Row, pool: Pool, quality: QualityContract, result: PassRate, seconds: float) -> dict:
    margin = task_tests.margins(row.cls, quality, {METRIC: pool.task_base}, {METRIC: pool.resolution})[METRIC][0]
    lo, hi = result.interval()
    loss = pool.base - row.cand
    return {"class": row.cls.word, "change": row.change, "size": row.size, "degradation": float(loss.mean()),
            "margin": margin, "ruined_share": float(np.mean(row.cand == 0.0)), "passes": result.passes,
            "sessions": result.sessions, "rate": result.rate, "interval": [lo, hi],
            "mean_cases": result.mean_cases, "independent": row.independent, "note": row.note,
            "seconds": round(seconds, 1)}


def _print(r: dict, out: Callable[[str], None] = print) -> None:
    lo, hi = r["interval"]
    out(f"{r['class']:<12} {r['change']:<44} {r['degradation']:+11.4g} {r['margin']:9.3g} {100 * r['rate']:6.2f}% "
        f"[{100 * lo:5.2f}, {100 * hi:5.2f}] {r['mean_cases']:5.0f}  {r['note']}")


if __name__ == "__main__":
    raise SystemExit(main())
