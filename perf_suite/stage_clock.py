"""Harness-side stage times and CUDA graph accounting for `dit-ar profile` (docs/design/speed-verdict.md).

The pipeline names its stages with `torch.profiler.record_function` ("text_encode", "denoise", "decode"); what
a stage *costs* is measured here, in the worker, never reported by the candidate:

* `StageClock` wraps `record_function`'s enter and exit for one generate and notes, at every outermost stage
  range, the host time and (on CUDA) an event on the current stream. A stage ends when its host code has
  returned *and* the device has finished the work queued before that exit; `partition` turns those ends into
  stage times that split the generate's latency (critical path), whatever ran the kernels: eager launches,
  compiled code or CUDA graph replays.
* `GraphLedger` wraps `torch.cuda.CUDAGraph`'s capture and replay: it counts the replays launched inside each
  stage (and times them with events), and, beside a FLOP counter, the FLOPs dispatched while each graph was
  captured, so that a steady generate of a graphed pipeline is counted as its replays times their captured
  FLOPs (a replay dispatches no operator a counter could see).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

STAGES = ("text_encode", "denoise", "decode")
OUTSIDE = "unattributed"  # time (and replays) outside every stage range


@dataclass(frozen=True)
class Span:
    """One outermost stage range of a generate: host times and the device's finish, in s from its start."""

    name: str
    enter_s: float
    exit_s: float
    device_exit_s: float | None = None  # when the device finished the work queued before the exit (CUDA)


@dataclass
class StageTimes:
    """A generate's latency split into its stages (critical path), with host times and graph replays."""

    total_ms: float
    stage_ms: dict[str, float]
    outside_ms: float
    host_ms: dict[str, float] = field(default_factory=dict)
    replays: dict[str, int] = field(default_factory=dict)
    replay_device_ms: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"total_ms": self.total_ms, "stage_ms": self.stage_ms, "outside_ms": self.outside_ms,
                "host_ms": self.host_ms, "replays": self.replays, "replay_device_ms": self.replay_device_ms}


def partition(spans: list[Span], total_s: float) -> tuple[dict[str, float], float]:
    """Stage times in ms that add up, with the time outside every stage, to the latency `total_s`.

    Stages are taken in the order they finished; each runs from the later of its host entry and the previous
    stage's end to the later of its host exit and its device finish. What lies between (host work outside a
    range, the result's hand-over) is the time outside stages."""
    stage: dict[str, float] = {}
    end = 0.0
    for span in sorted(spans, key=lambda s: s.exit_s):
        done = max(end, span.exit_s, span.device_exit_s or 0.0)
        stage[span.name] = stage.get(span.name, 0.0) + 1e3 * (done - max(end, span.enter_s))
        end = done
    return stage, max(0.0, 1e3 * total_s - sum(stage.values()))


class StageClock:
    """Within `with StageClock(torch):`, notes every outermost STAGES range of `record_function` (see above)."""

    def __init__(self, torch: Any, cuda: bool):
        self.torch, self.cuda = torch, cuda
        self.open: list[str] = []
        self.marks: list[tuple[str, float, float, Any]] = []  # name, host enter, host exit, exit event
        self._enter: dict[str, float] = {}
        self.origin: Any = None
        self.t0 = 0.0

    def current(self) -> str | None:
        """The outermost stage open now (None between stages)."""
        return self.open[0] if self.open else None

    def _event(self) -> Any:
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def start(self) -> None:
        """Start the generate's clock: the device is idle from here (synchronised), so its events line up."""
        if self.cuda:
            self.torch.cuda.synchronize()
            self.origin = self._event()
        self.t0 = time.perf_counter()

    def on_enter(self, name: str) -> None:
        if name in STAGES:
            if not self.open:
                self._enter[name] = time.perf_counter() - self.t0
            self.open.append(name)

    def on_exit(self, name: str) -> None:
        if name in STAGES and self.open and self.open[-1] == name:
            self.open.pop()
            if not self.open:
                self.marks.append((name, self._enter.pop(name, 0.0), time.perf_counter() - self.t0,
                                   self._event() if self.cuda else None))

    def stop(self) -> float:
        """The generate's latency in s (the caller has waited for its result); the device's events are done."""
        total = time.perf_counter() - self.t0
        if self.cuda:
            self.torch.cuda.synchronize()
        return total

    def spans(self) -> list[Span]:
        return [Span(name, enter, exit_, self.origin.elapsed_time(event) / 1e3 if event is not None else None)
                for name, enter, exit_, event in self.marks]

    def __enter__(self) -> StageClock:
        rf = self.torch.autograd.profiler.record_function
        self._saved = (rf.__enter__, rf.__exit__)
        enter, exit_ = self._saved
        clock = self

        def wrapped_enter(range_: Any) -> Any:
            clock.on_enter(getattr(range_, "name", ""))
            return enter(range_)

        def wrapped_exit(range_: Any, *exc: Any) -> Any:
            out = exit_(range_, *exc)
            clock.on_exit(getattr(range_, "name", ""))
            return out

        rf.__enter__, rf.__exit__ = wrapped_enter, wrapped_exit
        return self

    def __exit__(self, *exc: Any) -> None:
        rf = self.torch.autograd.profiler.record_function
        rf.__enter__, rf.__exit__ = self._saved


class GraphLedger:
    """Within `with GraphLedger(torch, ...):`, counts CUDA graph replays per stage and captured FLOPs per graph.

    `flops` (a callable giving a FLOP counter's running total) turns on the capture accounting; `clock` names
    the stage each replay ran in; `timed` records events around each replay (CUDA). `graph_cls` is the class
    whose capture_begin / capture_end / replay are wrapped (torch.cuda.CUDAGraph; tests pass a stand-in)."""

    def __init__(self, torch: Any, flops: Callable[[], int] | None = None, clock: StageClock | None = None,
                 timed: bool = False, graph_cls: Any = None):
        self.torch, self.flops, self.clock, self.timed = torch, flops, clock, timed
        self.graph_cls = graph_cls if graph_cls is not None else torch.cuda.CUDAGraph
        self.captured: dict[int, int] = {}  # id(graph) -> FLOPs dispatched during its capture
        self.replays: list[tuple[str | None, int, Any]] = []  # stage, id(graph), (start, end) events or None
        self._begin: dict[int, int] = {}

    def mark(self) -> int:
        """Where a steady generate's replays start (an index for replayed_flops)."""
        return len(self.replays)

    def replayed_flops(self, since: int = 0) -> tuple[int, int]:
        """FLOPs of the replays since `since` from their captures, and how many replays had no counted capture."""
        known = [self.captured[gid] for _, gid, _ in self.replays[since:] if gid in self.captured]
        return sum(known), len(self.replays) - since - len(known)

    def by_stage(self) -> tuple[dict[str, int], dict[str, float]]:
        """Replays and their device ms per stage (OUTSIDE for replays outside every stage range)."""
        count: dict[str, int] = {}
        device: dict[str, float] = {}
        for stage, _, events in self.replays:
            name = stage or OUTSIDE
            count[name] = count.get(name, 0) + 1
            if events is not None:
                device[name] = device.get(name, 0.0) + events[0].elapsed_time(events[1])
        return count, device

    def __enter__(self) -> GraphLedger:
        cls, ledger = self.graph_cls, self
        self._saved = {name: cls.__dict__.get(name) for name in ("capture_begin", "capture_end", "replay")}
        begin, end, replay = cls.capture_begin, cls.capture_end, cls.replay

        def capture_begin(graph: Any, *args: Any, **kwargs: Any) -> Any:
            if ledger.flops is not None:
                ledger._begin[id(graph)] = ledger.flops()
            return begin(graph, *args, **kwargs)

        def capture_end(graph: Any, *args: Any, **kwargs: Any) -> Any:
            out = end(graph, *args, **kwargs)
            if ledger.flops is not None and id(graph) in ledger._begin:
                ledger.captured[id(graph)] = ledger.flops() - ledger._begin.pop(id(graph))
            return out

        def wrapped_replay(graph: Any, *args: Any, **kwargs: Any) -> Any:
            stage = ledger.clock.current() if ledger.clock is not None else None
            if not ledger.timed:
                ledger.replays.append((stage, id(graph), None))
                return replay(graph, *args, **kwargs)
            first = ledger.torch.cuda.Event(enable_timing=True)
            first.record()
            out = replay(graph, *args, **kwargs)
            last = ledger.torch.cuda.Event(enable_timing=True)
            last.record()
            ledger.replays.append((stage, id(graph), (first, last)))
            return out

        cls.capture_begin, cls.capture_end, cls.replay = capture_begin, capture_end, wrapped_replay
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, fn in self._saved.items():
            if fn is None:
                delattr(self.graph_cls, name)
            else:
                setattr(self.graph_cls, name, fn)


def clocked_generate(torch: Any, cuda: bool, run: Callable[[], Any]) -> StageTimes:
    """Run one generate (`run` waits for its result) under the stage clock and the replay ledger."""
    clock = StageClock(torch, cuda)
    with clock, GraphLedger(torch, clock=clock, timed=cuda) as ledger:
        clock.start()
        run()
        total_s = clock.stop()
    stage_ms, outside_ms = partition(clock.spans(), total_s)
    host: dict[str, float] = {}
    for span in clock.spans():
        host[span.name] = host.get(span.name, 0.0) + 1e3 * (span.exit_s - span.enter_s)
    replays, replay_ms = ledger.by_stage()
    return StageTimes(1e3 * total_s, stage_ms, outside_ms, host, replays, replay_ms)
