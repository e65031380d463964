"""Noise models fitted to recorded rounds, and whole sessions of simulated experiments judged by exactly the
code that judges real ones (perf_suite.sequential.run_experiments, pooled_bound).

Models (each draws per-round log ratios log(candidate/best) of shape (N, pairs, rounds), no effect):
* `Switching` fitted to recorded H200 rounds: a host mode (fast ~0.44 s / slow ~0.69 s per generate, a
  two-state Markov chain over the rounds) that each side's process misses now and then (the mixed-mode
  rounds: 12% in wave 2, 33% in wave 3), with lognormal spread inside a mode.
* `Residuals`: rounds resampled from recorded segments' residuals (each segment centred on its own
  trimmed mean), used for the CPU lane.
* `Gaussian`: per-side lognormal noise of a given per-round sd (a CUDA-graph replay: ~0.1% per round).
Every regime adds a per-pair offset N(0, sigma_b^2) on top (the part that no round-level model has).

The oracles (`run_oracle`, `fixed_sample_power`) are tests that knew the true variance of a pair's trimmed mean
(`pair_variance`, by Monte Carlo on the regime): the bar the issue sets for the verdict's detection curve.

The fast test (lab/tests/test_verdict_simulation.py) and the study script (lab/studies/verdict_study.py) both
use this module; the recorded studies it fits come from lab/data (`regimes(LAB_DATA)`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import ndtr, ndtri

from perf_suite.sequential import (
    KEEP,
    Design,
    LookPoint,
    LookStats,
    OffsetBound,
    PairSpread,
    Verdicts,
    judge_looks,
    pooled_bound,
    run_experiments,
    segment_parts,
    trimmed,
)
from perf_suite.studies import StudyArm, StudyResults

LAB_DATA = Path(__file__).resolve().parents[1] / "data"  # the recorded studies (lab/data)
H200_STUDIES = ("h200/study-eager-20261130/study-h200-1.json", "h200/sequential-rerun-20261201/study.json")
CPU_STUDIES = ("cpu/study-quiet.json", "cpu/study-loaded.json", "cpu/study-loaded-long.json")
# the harness's own pairs of a CUDA-graphed best (wave 6: lab/device/calibrate.sh, the study engine)
GRAPH_STUDIES = ("h200/graphs-ladder-pixart24-20261202/calibrate/graphed.json",)
# the same engine on a best whose DiT forward is a hand-captured CUDA graph (fp32, no compile: patches 01 and
# examples/cuda-graphs; wave 10, two calls of 27 and 20 A/A pairs)
HAND_GRAPH_STUDIES = ("h200/graphed-keep-hand-graph-20261203/call2/calibrate/graphed.json",
                      "h200/graphed-keep-hand-graph-20261203/call3/calibrate/graphed.json")
# the regimes resampled from those studies, where their files are recorded: name -> (files, label)
RECORDED = {"graph-h200": (GRAPH_STUDIES, "CUDA-graphed best, H200, the harness's pairs"),
            "hand-graph-h200": (HAND_GRAPH_STUDIES, "hand-captured CUDA graph best, H200, the harness's pairs")}


def sleep_free(arm: StudyArm) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every pair's (candidate, best) round times with the arm's injected sleep taken off the best side."""
    delay = arm.delay_s or 0.0
    return [(np.asarray(p.cand_s, float), np.asarray(p.best_s, float) - delay) for p in arm.pairs]


def sleep_free_log_ratios(arm: StudyArm) -> list[np.ndarray]:
    """Every pair's log ratios with the arm's injected sleep's expected effect taken off."""
    delay = arm.delay_s or 0.0
    out = []
    for p in arm.pairs:
        c, b = np.asarray(p.cand_s, float), np.asarray(p.best_s, float)
        out.append(np.log(c / b) - np.log(c / (c + delay)))
    return out


def recorded_pairs(data_dir: Path, files: tuple[str, ...]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every recorded segment's (candidate, best) round times in seconds, the injected sleep taken off."""
    return [p for name in files for arm in StudyResults.read(data_dir / name).arms.values() for p in sleep_free(arm)]


def recorded_log_ratios(data_dir: Path, files: tuple[str, ...]) -> list[np.ndarray]:
    """Every recorded segment's log ratios, the injected sleep's expected effect taken off."""
    return [r for name in files for arm in StudyResults.read(data_dir / name).arms.values()
            for r in sleep_free_log_ratios(arm)]


@dataclass(frozen=True)
class Switching:
    """Fast/slow mode switching: a host mode (a two-state Markov chain over the rounds, shared by both sides
    of a round) that each side's process misses with probability `flip` (then it runs in the other mode),
    and lognormal spread `sd` inside a mode. Fitted to recorded rounds by `fit`."""

    p_switch: float  # host mode changes between two rounds
    p_slow: float  # stationary share of the slow mode
    flip: float  # a side runs in the other mode than the host's
    log_fast: float
    log_slow: float
    sd: float  # per side, inside a mode

    @classmethod
    def fit(cls, pairs: list[tuple[np.ndarray, np.ndarray]], threshold_s: float = 0.55) -> Switching:
        mixed, same, switches, slow, fast_t, slow_t = [], [], [], [], [], []
        for c, b in pairs:
            mc, mb = c > threshold_s, b > threshold_s
            mixed += list(mc != mb)
            same += list(np.log(c / b)[mc == mb])
            host = mc | mb
            switches += list(host[1:] != host[:-1])
            slow += list(host)
            for t, m in ((c, mc), (b, mb)):
                fast_t += list(t[~m])
                slow_t += list(t[m])
        p_mixed = float(np.mean(mixed))
        flip = (1 - math.sqrt(max(1 - 2 * p_mixed, 0.0))) / 2  # 2 q (1 - q) = P(mixed)
        return cls(float(np.mean(switches)), float(np.mean(slow)), flip, float(np.median(np.log(fast_t))),
                   float(np.median(np.log(slow_t))), _robust_sd(np.asarray(same)) / math.sqrt(2))

    def host(self, rng: np.random.Generator, shape: tuple[int, int, int]) -> np.ndarray:
        N, m, n = shape
        state = rng.random((N, m)) < self.p_slow
        out = np.empty(shape, bool)
        leave_slow = self.p_switch / (2 * self.p_slow)  # detailed balance keeps the stationary share p_slow
        leave_fast = self.p_switch / (2 * (1 - self.p_slow))
        for i in range(n):
            out[..., i] = state
            state = state ^ (rng.random((N, m)) < np.where(state, leave_slow, leave_fast))
        return out

    def side(self, rng: np.random.Generator, host: np.ndarray, centred: bool = False) -> np.ndarray:
        """Log round times of one side given the host modes."""
        mode = host ^ (rng.random(host.shape) < self.flip)
        level = np.where(mode, self.log_slow, self.log_fast)
        slow = self.p_slow * (1 - self.flip) + (1 - self.p_slow) * self.flip  # a side's share of slow rounds
        centre = slow * self.log_slow + (1 - slow) * self.log_fast if centred else 0.0
        return level - centre + self.sd * rng.standard_normal(host.shape)


def _robust_sd(x: np.ndarray) -> float:
    return float(np.median(np.abs(x - np.median(x))) / 0.6745)


@dataclass(frozen=True)
class Regime:
    """A noise regime of a candidate against a best, and the per-pair offset sigma_b on top.

    kind "switching": both sides switch with the shared host mode (`model`); "mixed": an eager switching
    candidate (centred on its mean log time) against a quiet best (`quiet`); "residuals": recorded log
    ratios resampled (`residuals`); "gaussian": per-side noise `quiet`."""

    name: str
    kind: str
    sigma_b: float = 0.013
    model: Switching | None = None
    quiet: Gaussian | None = None
    residuals: Residuals | None = None
    latency_s: float = 0.45  # one generate, for the wall-time model

    def draw(self, rng: np.random.Generator, shape: tuple[int, int, int], effect_pct: float = 0.0) -> np.ndarray:
        N, m, _ = shape
        if self.kind == "switching":
            host = self.model.host(rng, shape)
            r = self.model.side(rng, host) - self.model.side(rng, host)
        elif self.kind == "mixed":
            r = self.model.side(rng, self.model.host(rng, shape), centred=True) - self.quiet.draw(rng, shape)
        elif self.kind == "residuals":
            r = self.residuals.draw(rng, shape)
        else:
            r = self.quiet.draw(rng, shape) - self.quiet.draw(rng, shape)
        return r + self.sigma_b * rng.standard_normal((N, m, 1)) + math.log(1 - effect_pct / 100.0)


@dataclass(frozen=True)
class Gaussian:
    sd: float

    def draw(self, rng: np.random.Generator, shape: tuple[int, int, int]) -> np.ndarray:
        return self.sd * rng.standard_normal(shape)


@dataclass(frozen=True)
class Residuals:
    """Log ratios resampled from recorded segments, each centred on its trimmed mean (n/(n-1) rescaled)."""

    pool: np.ndarray

    @classmethod
    def of(cls, segments: list[np.ndarray]) -> Residuals:
        parts = []
        for r in segments:
            loc = trimmed(r[None, None, :])[0][0, 0]
            parts.append((r - loc) * math.sqrt(len(r) / (len(r) - 1)))
        return cls(np.concatenate(parts))

    def draw(self, rng: np.random.Generator, shape: tuple[int, int, int]) -> np.ndarray:
        return self.pool[rng.integers(0, len(self.pool), size=shape)]


def recorded_regime(data_dir: Path, files: tuple[str, ...], label: str) -> Regime | None:
    """A regime resampled from a study's recorded rounds (every arm, the injected sleep taken off), with the
    A/A pairs' measured between-pair sd on top; None when a file is not there."""
    if not all((data_dir / f).is_file() for f in files):
        return None
    studies = [StudyResults.read(data_dir / f) for f in files]
    null = [p.log_ratios() for s in studies for p in s.null]
    if len(null) < 2:
        return None
    latency = float(np.median([t for s in studies for p in s.null for t in p.best_s]))
    rounds = min(map(len, null))
    b = PairSpread.of(np.array([x[:rounds] for x in null])).offset_sd
    return Regime(label, "residuals", b, residuals=Residuals.of(recorded_log_ratios(data_dir, files)),
                  latency_s=latency)


def regimes(data_dir: Path) -> dict[str, Regime]:
    """The regimes the issue names: eager H200 (fitted), CPU (recorded), CUDA-graph-quiet, and mixed; plus
    the graphed bests as the harness measured them on the H200 ("graph-h200": compiled, "hand-graph-h200": a
    hand-captured graph) where their studies are recorded."""
    eager = Switching.fit(recorded_pairs(data_dir, H200_STUDIES))
    graph = Gaussian(0.001 / math.sqrt(2))
    cpu = Residuals.of(recorded_log_ratios(data_dir, CPU_STUDIES))
    return {"eager-h200": Regime("eager H200 (fast/slow switching fitted to waves 2-3)", "switching", 0.013, eager),
            "cpu": Regime("CPU (recorded rounds resampled)", "residuals", 0.013, residuals=cpu, latency_s=0.15),
            "graph": Regime("CUDA-graph replay, 0.1% per round", "gaussian", 0.001, quiet=graph, latency_s=0.30),
            "mixed": Regime("eager candidate vs graphed best", "mixed", 0.01, eager, graph, latency_s=0.38),
            **{name: reg for name, (files, label) in RECORDED.items()
               if (reg := recorded_regime(data_dir, files, label)) is not None}}


@dataclass(frozen=True)
class SessionOutcome:
    """Per experiment of N simulated sessions: decisions (N, E), rounds used (N, E), the B used (N, E)."""

    decision: np.ndarray
    rounds: np.ndarray
    bound_pct: np.ndarray

    def keep_rate(self, e: int | slice = slice(None)) -> float:
        return float(np.mean(self.decision[:, e] == KEEP))


def simulate_session(regime: Regime, design: Design, prior: OffsetBound, effects_pct: list[float], N: int,
                     rng: np.random.Generator, confidence: float = 0.9, min_df: int = 7,
                     calibration: PairSpread | None = None) -> SessionOutcome:
    """N sessions, each judging len(effects_pct) experiments in turn against the same best: B starts at the
    prior (plus an A/A `calibration` spread when given) and pools each finished experiment's spread."""
    last = design.schedule()[-1]
    pools: list[list[PairSpread]] = [[calibration] if calibration else [] for _ in range(N)]
    dec, rds, bnd = (np.zeros((N, len(effects_pct)), int) for _ in range(3))
    bnd = bnd.astype(float)
    for e, effect in enumerate(effects_pct):
        bounds = [pooled_bound(prior, p, confidence, min_df) for p in pools]
        B = np.array([b.sd for b in bounds])
        r = regime.draw(rng, (N, last.pairs, last.rounds), effect)
        out = run_experiments(r, design, B)
        dec[:, e], rds[:, e], bnd[:, e] = out.decision, out.rounds, [b.pct for b in bounds]
        for i, spread in enumerate(out.spread):
            if spread is not None:
                pools[i].append(spread)
    return SessionOutcome(dec, rds, bnd)


def calibration_spread(regime: Regime, pairs: int, rounds: int, rng: np.random.Generator) -> PairSpread:
    """The spread an A/A calibration of `pairs` pairs x `rounds` rounds measures on the regime."""
    return PairSpread.of(regime.draw(rng, (1, pairs, rounds))[0])


def pair_variance(regime: Regime, rounds: int, rng: np.random.Generator, n: int = 200_000) -> float:
    """The true variance of one pair's 20%-trimmed mean log ratio on the regime, its per-pair offset
    included (pairs are independent, so k pairs' mean has V / k): what an oracle test knows, by Monte Carlo."""
    return float(trimmed(regime.draw(rng, (n, 1, rounds)))[0].var(ddof=1))


def run_oracle(r: np.ndarray, design: Design, pair_var: float) -> Verdicts:
    """The verdict's own rule (the same looks, boundaries, minimum gain and early stops, `judge_looks`) in a
    test that knew the variance: SE^2 = V / k after k pairs and normal quantiles, nothing estimated. Segments
    layout only (the shipped one)."""
    if design.concurrent:
        raise ValueError("the oracle replays the segments layout; the concurrent design has no pair variance")
    N = r.shape[0]
    whole = segment_parts(r, design)
    nan = np.full(N, np.nan)

    def known(p: LookPoint) -> LookStats:
        est = whole.first(p.pairs).loc.mean(1)
        se = np.full(N, math.sqrt(pair_var / p.pairs))
        return LookStats(est, se, est / se, np.full(N, 1e7), nan, nan, nan)

    return judge_looks(N, design, known)


def fixed_sample_power(effect_pct: float, pair_var: float, pairs: float, alpha: float) -> float:
    """The power of one z-test at level `alpha` after `pairs` pairs that knew the variance (no minimum gain,
    no early stop): the most any test can detect with that many rounds."""
    delta = -math.log1p(-effect_pct / 100.0)
    return float(ndtr(delta / math.sqrt(pair_var / pairs) - ndtri(1.0 - alpha)))
