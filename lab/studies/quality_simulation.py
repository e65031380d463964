"""The task-score tests' error rates over many simulated sessions, from per-case scores recorded on the embedded lane.

    python -m lab.studies.quality_simulation --sessions 10000 [--data lab/data/cpu/quality/pool.npz]
                                             [--alpha 0.05] [--out lab/data/cpu/quality/simulation.json]

The data are `lab/studies/quality_record.py`'s pool: 20 blocks of the 40-case corpus under their own seeds, scored
for the baseline, two harmless changes (a reversed-batch rerun, 8-bit images), the demo's int8 and half-step
changes, and blends calibrated to 0.5, 1, 2 and 5 times each metric's margin (approximate) or resolution
(quantization). A session draws 5 blocks in a random order: the first is its corpus, the next ones are the cases
an undecided test adds (looks at 40, 80, 160 and 200 cases, as the gate's). Each row runs one metric's test
against the baseline, with the product's statistics (quality_suite/noninferiority.py) and the lane's design
(config/autoresearch.json, `quality.noninferiority`), and counts the sessions that pass.

The tests' spread floor (quality_suite/margin_spread.py) is measured per session as the baseline measures it:
on the session's own cases (its 5 blocks, the corpus and the cases a test may add), from the pool's blend at 1 x
the margin (or the resolution) of that row's class, scaled to the margin (`--floor none`: without the floor, the
rule before it). Set metrics get no floor, as in the product (`--floor set` gives them the blend's bootstrap
standard error as one, the variant measured and not shipped). The pool's blends have one weight each; the
baseline sets its weight on its own cases, which the scaling to the margin stands in for.

One shortcut keeps 10,000 sessions of a bootstrap affordable on a laptop: within a look the cases are taken in a
fixed order (sorted blocks), so the look of a given set of blocks is computed once and reused. A statistic over a
set does not depend on the order of its cases; only the bootstrap's random resamples do, and any fixed seed is an
equally valid bootstrap. lab/tests/test_quality_simulation.py checks, for a per-case metric, that every session
decides exactly as the product's `task_tests.run` does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dit_ar_contract.classes import ChangeClass
from dit_ar_contract.config import load_config
from quality_suite import margin_spread, task_metrics, task_tests
from quality_suite import noninferiority as ni
from quality_suite.calibration import PassRate

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "lab" / "data" / "cpu" / "quality" / "pool.npz"
METRICS = ("judge_accuracy", "frechet_distance")
SIZES = (0.5, 1.0, 2.0, 5.0)


def schedule(first: int, max_cases: int, block: int) -> list[int]:
    """Blocks seen at each look: the corpus, then doubling case counts up to the budget (task_tests.run)."""
    sizes, n = [first], first
    while n < max_cases:
        n = min(2 * n, max_cases)
        sizes.append(n)
    return [-(-s // block) for s in sizes]


@dataclass
class Engine:
    """One test (a metric against the baseline within a margin) over sessions of blocks, with cached looks."""

    spec: ni.TestSpec
    design: ni.Design
    base: np.ndarray  # rows of every pool case, [P] or [P, d]
    cand: np.ndarray
    blocks: np.ndarray  # [B, cases per block] row indices
    at_margin: np.ndarray | None = None  # the blend at 1 x this row's margin: the spread floor's rows (None: no floor)
    spreads: dict[tuple[int, ...], float] = field(default_factory=dict)  # per session's blocks (shared by rows)
    cache: dict[tuple[int, tuple[int, ...]], ni.Look] = field(default_factory=dict)

    def looks(self) -> list[int]:
        return schedule(self.blocks.shape[1], self.design.max_cases, self.blocks.shape[1])

    def spread(self, blocks: tuple[int, ...]) -> float:
        """The spread floor the baseline of a session with these blocks measures (margin_spread.spread_of)."""
        if self.at_margin is None:
            return 0.0
        if blocks not in self.spreads:
            m = self.spec.metric
            per_block = [task_tests.statistic_degradation(m, self.base[b].astype(np.float64),
                                                          self.at_margin[b].astype(np.float64))
                         for b in self.blocks[list(blocks)]]
            idx = self.blocks[list(blocks)].reshape(-1)
            self.spreads[blocks] = margin_spread.spread_of(
                m, self.base[idx].astype(np.float64), self.at_margin[idx].astype(np.float64), self.spec.margin,
                float(np.mean(per_block)), self.design.resamples)
        return self.spreads[blocks]

    def _look(self, k: int, chosen: tuple[int, ...], alpha: float, spread: float) -> ni.Look:
        """The look without the floor (cached: the bootstrap is the costly part), then the floor applied as
        noninferiority.mean_look / set_look apply it."""
        look = self._raw(k, chosen, alpha)
        floor = ni.floor_se(spread, look.n)
        return dataclasses.replace(look, se=max(look.se, floor), floor_se=floor)

    def _raw(self, k: int, chosen: tuple[int, ...], alpha: float) -> ni.Look:
        key = (k, chosen)
        if key not in self.cache:
            idx = self.blocks[list(chosen)].reshape(-1)[:self.design.max_cases]
            b, c = self.base[idx].astype(np.float64), self.cand[idx].astype(np.float64)
            s = self.spec
            if s.statistic is None:
                self.cache[key] = ni.mean_look(b, c, s.lower_is_better, alpha)
            else:
                self.cache[key] = ni.set_look(b, c, s.statistic, s.lower_is_better, alpha, self.design.resamples,
                                              ni.seed_of(s, len(idx)))
        return self.cache[key]

    def session(self, order: np.ndarray) -> tuple[bool, int]:
        """Whether a session with blocks in `order` passes, and the cases at its decision."""
        sched = self.looks()
        spread = self.spread(tuple(sorted(int(b) for b in order[:sched[-1]])))
        spent, before = 0.0, 0
        for k, nb in enumerate(sched):
            n = min(nb * self.blocks.shape[1], self.design.max_cases)
            last = k == len(sched) - 1
            alpha = max(self.design.alpha - spent, 0.0) if last else self.design.look_alpha(before, n)
            look = self._look(k, tuple(sorted(int(b) for b in order[:nb])), alpha, spread)
            decision, _ = ni.decide(look, self.spec.margin, last)
            if decision is not ni.Decision.MORE:
                return decision is ni.Decision.PASS, n
            spent, before = spent + alpha, n
        return False, before

    def rate(self, sessions: int, rng: np.random.Generator) -> PassRate:
        per = self.looks()[-1]
        results = [self.session(rng.permutation(len(self.blocks))[:per]) for _ in range(sessions)]
        return PassRate(sum(p for p, _ in results), sessions, float(np.mean([n for _, n in results])))


def load(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    return arrays, json.loads(str(arrays.pop("meta")))


def concentrated(arrays: dict[str, np.ndarray], metric: str, target: float, seed: int = 38) -> np.ndarray:
    """An adversarial change the floor does not cover: a few cases (chosen at random, seeded) lose their whole
    score, the rest nothing, so that the pool's mean degradation is `target` (a higher-is-better per-case score)."""
    base = arrays[f"base|{metric}"].astype(np.float64)
    order = np.random.default_rng(seed).permutation(len(base))
    lost = np.cumsum(base[order])
    chosen = order[:int(np.searchsorted(lost, target * len(base))) + 1]
    cand = base.copy()
    cand[chosen] = 0.0
    return cand


def rows_of(arrays: dict[str, np.ndarray], meta: dict, alpha: float | None,
            metrics: tuple[str, ...] = METRICS, floor: bool = True,
            set_floor: bool = False) -> list[tuple[str, str, str, float | None, Engine]]:
    """(metric, class, change, size, engine) for every row of the table."""
    quality = load_config(ROOT / "config" / "autoresearch.json").lanes["embedded-cpu"].quality
    if alpha is not None:
        quality = dataclasses.replace(quality, noninferiority=dataclasses.replace(quality.noninferiority,
                                                                                  alpha_q=alpha))
    corpus = int(meta["corpus"])
    blocks = np.arange(len(arrays["ids"])).reshape(-1, corpus)
    design = task_tests.design(quality, corpus)
    out = []
    for m in metrics:
        metric = task_metrics.metric(m)
        for cls in (ChangeClass.APPROXIMATE, ChangeClass.QUANTIZATION):
            margin, source = task_tests.margins(cls, quality, meta["task_base"], meta["resolution"])[m]
            spec = ni.TestSpec(m, task_tests.BASELINE, margin, source, metric.lower_is_better, metric.statistic)
            floored = floor and (set_floor or metric.statistic is None)
            at_margin = arrays[f"blend-{m}-{cls.word}-1|{m}"] if floored else None
            spreads: dict[tuple[int, ...], float] = {}  # the class's floor per session, shared by its rows
            changes = [("harmless: reversed batches", "rerun", None), ("harmless: 8-bit images", "8bit", None),
                       ("demo int8", "int8", None), ("demo half steps", "half", None)]
            changes += [(f"blend {k:g} x", f"blend-{m}-{cls.word}-{k:g}", k) for k in SIZES]
            if cls is ChangeClass.APPROXIMATE and metric.statistic is None:  # the floor's stated limit
                changes += [(f"concentrated {k:g} x", concentrated(arrays, m, k * margin), k) for k in (1.0, 2.0)]
            for label, variant, k in changes:
                cand = variant if isinstance(variant, np.ndarray) else arrays[f"{variant}|{m}"]
                engine = Engine(spec, design, arrays[f"base|{m}"], cand, blocks, at_margin, spreads)
                out.append((m, cls.word, label, k, engine))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--alpha", type=float, default=None, help="alpha_q (default: the config's)")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--metrics", default=",".join(METRICS), help="the metrics' rows to run (default all)")
    ap.add_argument("--floor", choices=("session", "none", "set"), default="session",
                    help="the tests' spread floor: measured on each session's cases (the product's), or none")
    args = ap.parse_args(argv)
    metrics = tuple(args.metrics.split(","))
    arrays, meta = load(args.data)
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    table = []
    print(f"{'metric':<17} {'class':<12} {'change':<27} {'degradation':>11} {'margin':>9} {'passed':>7} "
          f"{'[95% CI]':<14} cases")
    for m, cls, label, k, engine in rows_of(arrays, meta, args.alpha, metrics, args.floor != "none",
                                            args.floor == "set"):
        rate = engine.rate(args.sessions, rng)
        idx = engine.blocks.reshape(-1)
        per_block = [task_tests.statistic_degradation(m, engine.base[b].astype(np.float64),
                                                      engine.cand[b].astype(np.float64)) for b in engine.blocks]
        degradation = float(np.mean(per_block)) if len(idx) else float("nan")
        lo, hi = rate.interval()
        print(f"{m:<17} {cls:<12} {label:<27} {degradation:+11.4g} {engine.spec.margin:9.3g} "
              f"{100 * rate.rate:6.2f}% [{100 * lo:5.2f}, {100 * hi:5.2f}] {rate.mean_cases:5.0f}", flush=True)
        table.append({"metric": m, "class": cls, "change": label, "size": k, "degradation": degradation,
                      "margin": engine.spec.margin, "passes": rate.passes, "sessions": rate.sessions,
                      "interval": [lo, hi], "mean_cases": rate.mean_cases,
                      "mean_spread": float(np.mean(list(engine.spreads.values()))) if engine.spreads else 0.0})
    design = rows_of(arrays, meta, args.alpha, metrics)[0][4].design
    summary = {"sessions": args.sessions, "floor": args.floor, "alpha_q": design.alpha, "max_cases": design.max_cases,
               "spending_gamma": design.spending_gamma, "resamples": design.resamples, "data": str(args.data),
               "data_meta": {k: meta[k] for k in ("command", "machine", "date", "blocks", "resolution", "task_base")},
               "command": "python -m lab.studies.quality_simulation " + " ".join(argv or sys.argv[1:]),
               "seconds": round(time.perf_counter() - started, 1), "rows": table}
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{args.sessions} sessions per row, alpha_q {design.alpha}, budget {design.max_cases} cases; "
          f"{summary['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
