"""What a performance verdict is given besides its workers: the two sides' trees and workloads (`Side`), the
lane's protocol, prompts and guardrails, the per-round output check, the collector of the timed outputs and the
memory budget (`MeasurementPlan`);
loop/speed/measurement.py's `measure` runs it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dit_ar_contract.config import Guardrails, PerfProtocol
from dit_ar_contract.sides import Sides
from perf_suite.sequential import Design, OffsetBound
from perf_suite.warmup import WarmupRule

from ...worker.client import Generated
from ..workers.memory_plan import MemoryBudget

RoundCallback = Callable[[int, int, int], None]  # (segment index, rounds done in it, rounds per segment)
RoundCheck = Callable[[Generated, Generated], list[str]]  # candidate vs best outputs of the same requests
# every timed round's requests ([prompt, seed] per image) with the candidate's and the best's outputs of them,
# handed to whoever judges what was timed (the loop's top: loop/evidence.py); the speed room only hands them on
RoundCollector = Callable[[list[list[Any]], Generated, Generated], None]


@dataclass(frozen=True)
class Side:
    """One side of an A/B measurement: its name, the tree it runs and the workload it builds."""

    name: str
    root: Path
    spec: dict[str, Any]


@dataclass(frozen=True)
class MeasurementPlan:
    """Everything `measure` needs besides the workers."""

    cand: Side
    best: Side
    protocol: PerfProtocol
    prompts: tuple[str, ...]
    batch: int
    metric: str
    guardrails: Guardrails = field(default_factory=Guardrails)
    is_cuda: bool = False
    log_dir: Path = Path(".")
    roofline_ms: float | None = None
    max_segments: int | None = None  # overrides the protocol's (the baseline's A/A run takes one)
    resolution: int | None = None  # the lane's: outputs of another size break the seam
    check: RoundCheck | None = None  # candidate vs best outputs of every timed round
    collect: RoundCollector | None = None  # every timed round's requests and both sides' outputs, handed on
    bound: OffsetBound | None = None  # the session's bound on the between-process sd (state.noise)
    memory: MemoryBudget | None = None  # what live workers may hold together (None: not limited)
    known_peaks_mb: Sides[float | None] = field(default_factory=lambda: Sides(None, None))  # measured before
    cold_start_s: float | None = None  # the candidate tree's first worker: build + first generate (recorded only)

    @property
    def sides(self) -> Sides[Side]:
        return Sides(self.cand, self.best)

    def warmup_rule(self) -> WarmupRule:
        p = self.protocol
        return WarmupRule(p.warmup_rounds, p.warmup_window, p.warmup_steady_pct, p.warmup_max_rounds)

    def design(self) -> Design:
        return Design.from_protocol(self.protocol, self.metric, self.max_segments)

    def offset_bound(self) -> OffsetBound:
        return self.bound or OffsetBound.default("cuda" if self.is_cuda else "cpu")

    def segments_allowed(self) -> int:
        return self.max_segments or self.protocol.max_segments
