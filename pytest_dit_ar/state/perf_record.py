"""perf.json, the record of one performance verdict: one schema that its writer (loop/speed/measurement.py builds a
`PerfRecord` as it measures) and its readers (the report, `dit-ar status`, re-validation, the summary) share.

`PerfRecord.to_dict` writes the file's shape and its format version (`PERF_FORMAT`); `from_dict` reads it back
into the same types, refusing a version this harness does not know, as pyperf and asv refuse one. A perf.json
without a version reads as version 1; so do the records of runs timed in blocks before the sequential test
(`blocks` instead of `segments`, each with its `BlockStats`; `sequential` is then False) and a baseline's A/A
segment (`PerfRecord.aa_segment`). Derived figures (`startup`, `rounds`, `rounds_flagged`, `look`, each
segment's `flagged_rounds`) are written for a reader of the file and recomputed, never read back.

Every round keeps its order, each side's wall-clock times and the GPU's state right after it (`RoundRecord`,
measured by loop/speed/clean_rounds.py); a round in which a side's GPU named a slowdown (power cap, thermal, power
brake, hardware slowdown), whose SM clock fell (state/clocks.py) or that was busy before timing is flagged; it is
excluded (and replaced) only when the best's clock fell, else kept in the verdict.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dit_ar_contract.sides import ROLES, Role, Sides

from .clocks import SLOWDOWNS, ClockSpan
from .files import VERSION_KEY, check_version, fields_from

if TYPE_CHECKING:  # imported on use: scipy stays out of `dit-ar status`
    from perf_suite.sequential import Look, PairSpread

    from .baseline import BaselineSummary

PERF_FORMAT = 1  # the version of perf.json this harness writes and the newest it reads


def _floats(values: Any) -> list[float]:
    return [float(v) for v in values or () if isinstance(v, (int, float))]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _look(data: Any) -> Look | None:
    from perf_suite.sequential import Look

    return fields_from(Look, data) if isinstance(data, Mapping) else None


# -- one timed round ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuSample:
    """One NVML reading of the lane's GPU (the fullest one of a multi-GPU lane is read first)."""

    sm_clock_mhz: int | None = None
    power_w: float | None = None
    temperature_c: int | None = None
    throttle_reasons: int = 0
    utilization_pct: int | None = None

    @property
    def slowdowns(self) -> list[str]:
        return [name for bit, name in SLOWDOWNS.items() if self.throttle_reasons & bit]


def _without_absent(data: Any, optional: tuple[str, ...]) -> dict[str, Any]:
    """A dataclass as a dict, the `optional` fields left out while unset (a record of an earlier harness writes
    back the same keys it had)."""
    return {k: v for k, v in asdict(data).items() if k not in optional or v not in (None, [])}


def _spans(data: Any) -> list[ClockSpan]:
    spans = [ClockSpan.from_dict(c) for c in data or () if isinstance(c, Mapping)]
    return [s for s in spans if s is not None]


@dataclass
class SideTiming:
    """One side's part of a round: wall-clock start and end (epoch seconds), the idle wait before it, the GPU
    readings right after it, its SM clock while it ran (state/clocks.py, per GPU) and its round-trip time."""

    start: float
    end: float
    idle_wait_s: float = 0.0
    idle: bool = True
    gpu: list[GpuSample] = field(default_factory=list)
    clock: list[ClockSpan] = field(default_factory=list)
    seconds: float | None = None

    @property
    def slowdowns(self) -> list[str]:
        reasons = {s for g in self.gpu for s in g.slowdowns}
        for span in self.clock:
            reasons.update(name for bit, name in SLOWDOWNS.items() if span.reasons & bit)
        return sorted(reasons)

    @property
    def clock_fell(self) -> bool:
        return any(span.fell for span in self.clock)

    @classmethod
    def from_dict(cls, data: Any) -> SideTiming:
        data = data if isinstance(data, Mapping) else {}
        timing = fields_from(cls, {k: v for k, v in data.items() if k not in ("gpu", "clock")})
        timing.gpu = [fields_from(GpuSample, g) for g in data.get("gpu") or () if isinstance(g, Mapping)]
        timing.clock = _spans(data.get("clock"))
        return timing


@dataclass
class RoundRecord:
    """One timed round: its order ("CB": candidate first, or "BC") and each side's timing and GPU state.
    `excluded`: the best's SM clock fell while it ran (state/clocks.py), so the round's times are left out of
    the verdict and another round is played in its place (loop/speed/segment.py; at most a quarter of a segment's)."""

    index: int
    order: str
    sides: Sides[SideTiming]
    excluded: bool = False

    @property
    def clock_fell(self) -> Sides[bool]:
        return self.sides.map(lambda t: t.clock_fell)

    @property
    def throttled(self) -> Sides[list[str]]:
        """The slowdowns each side's GPU reading named (empty: none)."""
        return self.sides.map(lambda t: t.slowdowns)

    @property
    def busy_before(self) -> list[Role]:
        """The sides timed although the GPU still showed work in flight after the wait."""
        return [role for role, t in self.sides.items() if not t.idle]

    @property
    def flagged(self) -> bool:
        return bool(any(self.throttled.values()) or self.busy_before or any(self.clock_fell.values()))

    def clock_lines(self) -> list[str]:
        """What dropped, per side whose clock fell: 'best: SM clock 1410 of 1980 MHz for 0.80 s of 1.20 s; ...'."""
        return [f"{role.key}: {span.describe()}" for role, t in self.sides.items() for span in t.clock if span.fell]

    def to_dict(self) -> dict[str, Any]:
        d = {"index": self.index, "order": self.order,
             "throttled": {k: v for k, v in self.throttled.to_dict().items() if v},
             "sides": self.sides.to_dict(lambda t: _without_absent(t, ("clock", "seconds")))}
        fell = self.clock_lines()
        return {**d, **({"clock_fell": fell} if fell else {}), **({"excluded": True} if self.excluded else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], position: int) -> RoundRecord:
        index = data.get("index")
        return cls(index if isinstance(index, int) else position, str(data.get("order", "")),
                   Sides.from_dict(data.get("sides"), SideTiming.from_dict), bool(data.get("excluded", False)))


def flagged(records: list[RoundRecord]) -> list[int]:
    """Indices of the rounds in which a side was throttled or timed with the GPU still busy."""
    return [r.index for r in records if r.flagged]


def rounds_summary(records: list[RoundRecord]) -> str | None:
    """One line for the verdict's summary when any round was flagged, else None: what was flagged, in how many
    rounds per side, whether the SM clock fell (the lowest clock and for how long) and what was excluded."""
    bad = [r for r in records if r.flagged]
    if not bad:
        return None
    counts = {role: 0 for role in ROLES}
    kinds: set[str] = set()
    for r in bad:
        for role, names in r.throttled.items():
            counts[role] += bool(names or r.sides[role].clock_fell)
            kinds.update(names)
        for role in r.busy_before:
            counts[role] += 1
            kinds.add("GPU busy before timing")
    fell = [r for r in bad if any(r.clock_fell.values())]
    excluded = [r for r in records if r.excluded]
    if fell:
        spans = [s for r in fell for t in r.sides.values() for s in t.clock if s.fell]
        worst = min(spans, key=lambda s: s.min_mhz)
        clock = (f"SM clock fell in {len(fell)} (lowest {worst.min_mhz} of {worst.max_mhz} MHz, for up to "
                 f"{max(s.below_s for s in spans):.2f} s of a side)")
    else:
        clock = "SM clock at its maximum throughout (flags only)"
    kept = len(bad) - len(excluded)
    return (f"{len(bad)} of {len(records)} timed rounds flagged ({', '.join(sorted(kinds)) or 'clock'}; candidate "
            f"{counts[Role.CANDIDATE]}, best {counts[Role.BEST]}); {clock}; {len(excluded)} excluded and "
            f"replaced (the best's clock fell), {kept} kept in the verdict; see perf.json rounds")


# -- one segment --------------------------------------------------------------------------------------

STEADY_FIELDS = ("steady_host_mb", "steady_gpu_mb", "steady_sampled_mb")


@dataclass(frozen=True)
class MemoryFigures:
    """One side's memory in a segment as the harness sampled it (MB): host memory (the cgroup's anonymous +
    shared memory, kept under its old key `peak_rss_mb`), device memory by NVML at the end and sampled while
    it ran, the cgroup's own peak, the longest freeze wait (ms), and the worker's own figures for reference.
    The `steady_*` figures are the same harness samples taken from the end of warm-up to the end of timing:
    the steady state, without the transient of a first generate (a compile, a graph capture)."""

    peak_rss_mb: float | None = None
    gpu_nvml_mb: float | None = None
    gpu_sampled_mb: float | None = None
    kernel_peak_mb: float | None = None
    freeze_wait_max_ms: float | None = None
    peak_reserved_mb: float | None = None
    peak_allocated_mb: float | None = None
    steady_host_mb: float | None = None
    steady_gpu_mb: float | None = None
    steady_sampled_mb: float | None = None

    @property
    def peak_mb(self) -> float | None:
        """The side's whole-run peak as the harness trusts it: device memory on GPUs, the host's on CPUs (what a
        hard budget judges: a worker needs it at some point)."""
        gpu = [v for v in (self.gpu_nvml_mb, self.gpu_sampled_mb, self.peak_reserved_mb) if v]
        return max(gpu) if gpu else self.peak_rss_mb

    @property
    def steady_mb(self) -> float | None:
        """The side's steady peak (after warm-up, harness-sampled: NVML on GPUs, the cgroup on CPUs), what the
        growth guardrail judges; a record without it (an earlier harness) reads its whole-run peak."""
        gpu = [v for v in (self.steady_gpu_mb, self.steady_sampled_mb) if v]
        if gpu:
            return max(gpu)
        if self.gpu_nvml_mb or self.gpu_sampled_mb:
            return self.peak_mb
        return self.steady_host_mb or self.peak_mb

    @property
    def device_mb(self) -> float | None:
        """Device memory as the harness saw it: sampled while the worker ran, else read at the end."""
        return self.gpu_sampled_mb or self.gpu_nvml_mb

    @classmethod
    def from_dict(cls, data: Any) -> MemoryFigures:
        data = data if isinstance(data, Mapping) else {}
        return cls(**{f.name: _number(data.get(f.name)) for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class BlockStats:
    """A timed block's statistics, as runs made before the sequential test stored them (read only)."""

    rounds: int | None = None
    best_median_ms: float | None = None
    cand_median_ms: float | None = None
    best_p95_ms: float | None = None
    cand_p95_ms: float | None = None
    median_ratio: float | None = None
    ci_upper_ratio: float | None = None
    improvement_pct: float | None = None
    p_value: float | None = None
    passes: bool | None = None


def _no_times() -> Sides[list[float]]:
    return Sides.of(lambda _: [])


@dataclass
class SegmentRecord:
    """What one segment measured (times in seconds, per round, per side), in a fresh pair of workers."""

    index: int
    cand_s: list[float]
    best_s: list[float]
    seeds: list[list[int]] = field(default_factory=list)
    orders: list[str] = field(default_factory=list)  # per round "CB" or "BC"
    warmup_s: Sides[list[float]] = field(default_factory=_no_times)
    build_s: Sides[float] = field(default_factory=lambda: Sides(0.0, 0.0))
    memory: Sides[MemoryFigures] = field(default_factory=lambda: Sides(MemoryFigures(), MemoryFigures()))
    unfaithful: list[str] = field(default_factory=list)  # the timed outputs are not the judged work
    look: Look | None = None
    fresh: bool = True  # both workers started for this segment (their build and warm-up are a first use)
    rounds: list[RoundRecord] = field(default_factory=list)  # per round: order, times, GPU state
    ready_s: Sides[float | None] = field(default_factory=lambda: Sides(None, None))  # forked: fork to hello
    forked: bool = False  # the pair came from the fork servers
    warmup_state: Sides[str] = field(default_factory=lambda: Sides("", ""))  # "steady" or "capped"
    warm_cache: Sides[bool | None] = field(default_factory=lambda: Sides(None, None))  # cache filled before
    layout: str = "pair"  # "pair" (both alive, interleaved) or "alternate" (one side at a time: memory_plan)
    live_peak_mb: float | None = None  # device memory of all live workers together, sampled (NVML)
    spawn_s: float = 0.0  # alternate layout: starting its workers' processes (to their hello), both sides
    close_s: float = 0.0  # alternate layout: closing them (the card's memory given back)
    together_s: float = 0.0  # wall time of the first warm-up generates run at once (GPU lanes), else 0
    divergence: float | None = None  # runs timed in blocks before the sequential test (read only)
    stats: BlockStats | None = None  # a block's statistics (read only, as `divergence`)
    escaped: list[str] = field(default_factory=list)  # threads found off the timed cores after a timed round

    @property
    def times(self) -> Sides[list[float]]:
        return Sides(self.cand_s, self.best_s)

    @property
    def is_segment(self) -> bool:
        """A segment of the sequential test (False: a block of a run timed before it)."""
        return self.stats is None

    @property
    def warmup_wall_s(self) -> float:
        """The warm-up's wall time: both sides' rounds, the first generates run at once counted once."""
        cand, best = self.warmup_s.values()
        total = sum(cand) + sum(best)
        if self.together_s and cand and best:
            total -= cand[0] + best[0] - self.together_s
        return total

    def median_ms(self, role: Role) -> float:
        return float(np.median(self.times[role])) * 1e3

    def startup_s(self, role: Role) -> float:
        """Build plus warm-up rounds of the side's fresh worker (where loading and compilation cost show)."""
        return self.build_s[role] + sum(self.warmup_s[role])

    def peak_memory_mb(self, role: Role) -> float | None:
        """The side's peak memory as trusted by the harness: device memory on GPUs, resident set on CPUs."""
        return self.memory[role].peak_mb

    def steady_memory_mb(self, role: Role) -> float | None:
        """The side's peak memory after warm-up (MemoryFigures.steady_mb)."""
        return self.memory[role].steady_mb

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "index": self.index, "cand_s": self.cand_s, "best_s": self.best_s, "seeds": self.seeds,
            "orders": self.orders, "warmup_s": self.warmup_s.to_dict(), "build_s": self.build_s.to_dict(),
            "memory": self.memory.to_dict(lambda m: _without_absent(m, STEADY_FIELDS)),
            "unfaithful": self.unfaithful, "fresh": self.fresh,
            "ready_s": self.ready_s.to_dict(skip_none=True), "forked": self.forked,
            "warmup_state": {k: v for k, v in self.warmup_state.to_dict().items() if v},
            "warm_cache": self.warm_cache.to_dict(), "layout": self.layout, "live_peak_mb": self.live_peak_mb,
            "spawn_s": self.spawn_s, "close_s": self.close_s, "together_s": self.together_s,
            "look": self.look.as_dict() if self.look else None, "rounds": [r.to_dict() for r in self.rounds],
            "flagged_rounds": flagged(self.rounds)}
        if self.escaped:
            d["escaped"] = self.escaped
        if self.divergence is not None or self.stats is not None:
            d["divergence"], d["stats"] = self.divergence, asdict(self.stats) if self.stats else None
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], position: int = 0) -> SegmentRecord:
        """A segment (or a block of a run made before the sequential test) as `to_dict` or an earlier harness
        wrote it; what it lacks reads as the field's default."""
        index, stats, layout = data.get("index"), data.get("stats"), data.get("layout")
        return cls(
            index if isinstance(index, int) else position, _floats(data.get("cand_s")), _floats(data.get("best_s")),
            [[int(s) for s in r] for r in data.get("seeds") or () if isinstance(r, list)],
            [str(o) for o in data.get("orders") or ()], Sides.from_dict(data.get("warmup_s"), _floats),
            Sides.from_dict(data.get("build_s"), lambda v: _number(v) or 0.0),
            Sides.from_dict(data.get("memory"), MemoryFigures.from_dict),
            [str(u) for u in data.get("unfaithful") or ()], _look(data.get("look")), bool(data.get("fresh", True)),
            [RoundRecord.from_dict(r, i) for i, r in enumerate(data.get("rounds") or ()) if isinstance(r, Mapping)],
            Sides.from_dict(data.get("ready_s"), _number), bool(data.get("forked", False)),
            Sides.from_dict(data.get("warmup_state"), lambda v: str(v or ""), ""),
            Sides.from_dict(data.get("warm_cache"), lambda v: v if isinstance(v, bool) else None),
            layout if isinstance(layout, str) else "pair", _number(data.get("live_peak_mb")),
            _number(data.get("spawn_s")) or 0.0, _number(data.get("close_s")) or 0.0,
            _number(data.get("together_s")) or 0.0, _number(data.get("divergence")),
            fields_from(BlockStats, stats) if isinstance(stats, Mapping) else None,
            [str(e) for e in data.get("escaped") or ()])


# -- the verdict --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Startup:
    """How the workers started: warm-up rounds per side and segment, the warm and cold start-up against the
    budget (guardrail figures), and how the workers shared the memory."""

    warmup_rounds: Sides[list[int]]
    warmup_state: Sides[list[str]]
    cand_warm_startup_s: float | None
    best_startup_s: float | None
    startup_growth_pct: float | None
    startup_budget_s: float | None
    cand_cold_start_s: float | None
    layouts: list[str]
    memory_layout: str | None
    live_peak_mb: float | None

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["warmup_rounds"], d["warmup_state"] = self.warmup_rounds.to_dict(), self.warmup_state.to_dict()
        return d

    def line(self) -> str:
        """The summary's line: warm-up rounds each side needed, warm start against the budget, cold compile."""
        def rounds(role: Role) -> str:
            capped = sum(1 for x in self.warmup_state[role] if x == "capped")
            return "/".join(map(str, self.warmup_rounds[role])) + (f" ({capped} capped)" if capped else "")

        parts = [f"warm-up rounds per segment: candidate {rounds(Role.CANDIDATE)}, best {rounds(Role.BEST)}"]
        if self.cand_warm_startup_s is not None:
            text = f"warm start {self.cand_warm_startup_s:.1f} s"
            if self.startup_budget_s:
                text += f" (budget {self.startup_budget_s:g} s)"
            if self.best_startup_s is not None and self.startup_growth_pct is not None:
                text += f", best {self.best_startup_s:.1f} s ({self.startup_growth_pct:+.0f}%)"
            parts.append(text)
        if self.cand_cold_start_s is not None:
            parts.append(f"cold start {self.cand_cold_start_s:.1f} s (the tree's first worker: build + first "
                         "generate, where a compile happens; recorded, not judged)")
        if "alternate" in self.layouts:
            parts.append("one side at a time: " + str(self.memory_layout))
        return "; ".join(parts)


@dataclass
class PerfRecord:
    """The performance verdict of a run: keep or not and why, its segments, where the time went (`seconds`),
    the guardrails' figures, the pairs' pool and spread. `keep` is None for a baseline's A/A segment."""

    keep: bool | None
    reasons: list[str]
    segments: list[SegmentRecord]
    seconds: dict[str, float] = field(default_factory=dict)
    guardrails: dict[str, Any] = field(default_factory=dict)  # perf_suite.guardrails' figures by name
    pool: dict[str, Any] = field(default_factory=dict)  # fork servers' start and fork times, the pool plan
    spread: PairSpread | None = None  # the pairs' spread, for the session's pool (state.noise)
    sequential: bool = True  # False: a run timed in blocks before the sequential test (read only)
    last_look: Look | None = None  # the record's own top-level look, as read (its segments' last, when written)

    @property
    def rounds_flagged(self) -> str | None:
        """One line when a timed round had a throttled side or a busy GPU before it."""
        return rounds_summary([r for s in self.segments for r in s.rounds])

    @property
    def unfaithful(self) -> list[str]:
        """What the harness found wrong with the timed outputs themselves (judged as quality, not speed)."""
        return [p for s in self.segments for p in s.unfaithful]

    @property
    def look(self) -> Look | None:
        """The sequential test's last look (None in a run timed in blocks)."""
        looks = [s.look for s in self.segments if s.look is not None]
        return looks[-1] if looks else self.last_look

    @property
    def rounds(self) -> int:
        return sum(len(s.cand_s) for s in self.segments)

    def samples(self, role: Role) -> list[float]:
        return [t for s in self.segments for t in s.times[role]]

    def median_ms(self, role: Role) -> float | None:
        samples = self.samples(role)
        return float(np.median(samples)) * 1e3 if samples else None

    def p95_ms(self, role: Role) -> float | None:
        samples = self.samples(role)
        return float(np.percentile(samples, 95)) * 1e3 if samples else None

    @property
    def nominal_p(self) -> float | None:
        """The fixed-sample one-sided p-value of the last look's z (the boundary, not 0.01, decides)."""
        from scipy.stats import norm

        look = self.look
        return float(norm.cdf(look.z)) if look and math.isfinite(look.z) else None

    def peak_memory_mb(self, role: Role = Role.CANDIDATE) -> float | None:
        peaks = [m for m in (s.peak_memory_mb(role) for s in self.segments) if m is not None]
        return max(peaks) if peaks else None

    def startup(self) -> Startup:
        g = self.guardrails

        def figure(name: str) -> float | None:
            return _number(g.get(name))

        memory_layout = g.get("memory_layout")
        return Startup(Sides.of(lambda r: [len(s.warmup_s[r]) for s in self.segments]),
                       Sides.of(lambda r: [s.warmup_state[r] for s in self.segments]),
                       figure("cand_warm_startup_s"), figure("best_startup_s"), figure("startup_growth_pct"),
                       figure("startup_budget_s"), figure("cand_cold_start_s"), [s.layout for s in self.segments],
                       memory_layout if isinstance(memory_layout, str) else None,
                       max((s.live_peak_mb for s in self.segments if s.live_peak_mb), default=None))

    def startup_line(self) -> str:
        return self.startup().line()

    def memory_line(self) -> str | None:
        """The summary's memory line: each side's steady peak (judged against the best's) and whole-run peak (a
        compile's transient included: judged only by the budget). None when the record has no steady figures."""
        g = self.guardrails
        cand, best = _number(g.get("cand_steady_mb")), _number(g.get("best_steady_mb"))
        if cand is None or best is None:
            return None
        line = f"steady (after warm-up, judged) candidate {cand:.0f} MB, best {best:.0f} MB"
        limit = _number(g.get("memory_limit_mb"))
        if limit is not None:
            line += f" (limit {limit:.0f} MB)"
        peaks = _number(g.get("cand_peak_mb")), _number(g.get("best_peak_mb"))
        if peaks[0] is not None and peaks[1] is not None:
            budget = _number(g.get("budget_mb"))
            line += (f"; whole run (compile and warm-up included, recorded) candidate {peaks[0]:.0f} MB, best "
                     f"{peaks[1]:.0f} MB" + (f" (budget {budget:.0f} MB)" if budget else ""))
        return line

    def forked_workers(self) -> tuple[list[float], list[float]] | None:
        """The fork servers' figures: every forked worker's fork-to-hello and every fork server's start (seconds),
        None when the pairs were not forked."""
        times = self.pool.get("fork_times")
        if not isinstance(times, Mapping) or not times:
            return None
        sides = [t for t in times.values() if isinstance(t, Mapping)]
        return ([float(x) for t in sides for x in t.get("fork_ready_s") or ()],
                [float(x) for t in sides for x in t.get("zygote_ready_s") or ()])

    def to_dict(self) -> dict[str, Any]:
        look = self.look
        return {VERSION_KEY: PERF_FORMAT, "startup": self.startup().to_dict(), "keep": self.keep,
                "reasons": self.reasons, "seconds": self.seconds, "rounds": self.rounds,
                "guardrails": self.guardrails, "pool": self.pool, "rounds_flagged": self.rounds_flagged,
                "spread": self.spread.as_dict() if self.spread else None,
                "look": look.as_dict() if look else None,
                "segments": [s.to_dict() for s in self.segments]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "perf record") -> PerfRecord:
        """What `to_dict` (or an earlier harness) wrote; a format version this harness does not know is refused."""
        from perf_suite.sequential import PairSpread

        check_version(data, where, PERF_FORMAT)
        sequential = "segments" in data
        parts = [p for p in data.get("segments") or data.get("blocks") or () if isinstance(p, Mapping)]
        segments = [SegmentRecord.from_dict(p, i) for i, p in enumerate(parts)]
        seconds = {str(k): float(v) for k, v in _mapping(data.get("seconds")).items() if _number(v) is not None}
        spread = data.get("spread")
        keep = data.get("keep")
        return cls(keep if isinstance(keep, bool) else None, [str(r) for r in data.get("reasons") or ()], segments,
                   seconds, _mapping(data.get("guardrails")), _mapping(data.get("pool")),
                   fields_from(PairSpread, spread) if isinstance(spread, Mapping) else None, sequential,
                   _look(data.get("look")))

    @classmethod
    def aa_segment(cls, summary: BaselineSummary) -> PerfRecord | None:
        """The baseline's A/A segment (both sides run the baseline) as a run's timing; None when it has none."""
        aa = summary.timing.aa_segment
        if not aa:
            return None
        return cls(None, ["baseline A/A: both sides run the baseline (noise floor)"], [SegmentRecord.from_dict(aa)])


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}
