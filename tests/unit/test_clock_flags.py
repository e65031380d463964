"""Clock flags say what dropped: the SM clock against the GPU's maximum and for how long, from (fake) NVML
samples taken while each side ran (state/clocks.py, loop/speed/clean_rounds.py). A throttle reason with the clock at
its maximum is a flag only; a round is excluded (and another played in its place) only when the best's clock
fell, at most a quarter of a segment's rounds; a fall on the candidate's side alone keeps the round."""

from __future__ import annotations

import random
import sys
import time

import pytest

from dit_ar_contract.sides import Role
from pytest_dit_ar.loop.speed import clean_rounds
from pytest_dit_ar.loop.speed.segment import run_segment
from pytest_dit_ar.state.clocks import FELL_FRACTION, ClockSpan, summarize
from pytest_dit_ar.state.perf_record import RoundRecord, SegmentRecord, rounds_summary
from tests.unit.test_clean_rounds import FakeWatch, fake_pair, fake_pynvml

STEP = 0.02
POWER_CAP = 0x4


def samples(clocks: list[int], reasons: int = 0) -> tuple[list[float], list[int | None], list[int]]:
    return [i * STEP for i in range(len(clocks))], list(clocks), [reasons] * len(clocks)


def test_a_fall_is_said_with_the_lowest_clock_and_how_long() -> None:
    span = summarize(*samples([1980] * 20 + [1410] * 40), max_mhz=1980)
    assert span is not None and span.fell
    assert (span.min_mhz, span.below_s, span.span_s) == (1410, pytest.approx(0.8), pytest.approx(1.2))
    with_reason = summarize(*samples([1980] * 20 + [1410] * 40, POWER_CAP), max_mhz=1980)
    assert with_reason is not None
    assert with_reason.describe() == "SM clock 1410 of 1980 MHz for 0.80 s of 1.20 s; power cap"


def test_a_power_cap_at_full_clock_is_a_flag_not_a_fall() -> None:
    span = summarize(*samples([1980] * 60, POWER_CAP), max_mhz=1980)
    assert span is not None and not span.fell and span.below_s == 0 and span.reasons == POWER_CAP


def test_idle_samples_and_a_short_dip_do_not_count_as_a_fall() -> None:
    times, clocks, reasons = samples([345] * 10 + [1980] * 50)
    reasons[:10] = [0x1] * 10  # the GPU idle between kernels: its clock drops by design
    span = summarize(times, clocks, reasons, 1980)
    assert span is not None and not span.fell and span.min_mhz == 1980
    dip = summarize(*samples([1980] * 57 + [1700] * 3), max_mhz=1980)  # 0.06 s of 1.2 s: under a tenth
    assert dip is not None and not dip.fell and dip.below_s == pytest.approx(0.06)
    threshold = int(FELL_FRACTION * 1980)  # 1881 MHz
    assert not summarize(*samples([threshold + 1] * 60), max_mhz=1980).fell  # type: ignore[union-attr]


def test_the_nvml_watch_traces_the_clock_while_a_side_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = fake_pynvml(POWER_CAP, [0])
    nvml.nvmlDeviceGetClockInfo = lambda h, kind: 1410
    nvml.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    trace = clean_rounds.NvmlWatch(["GPU-1"]).trace()
    time.sleep(0.05)
    (span,) = trace.stop()
    assert span.fell and span.max_mhz == 1980 and span.min_mhz == 1410 and span.samples >= 2
    assert span.describe().startswith("SM clock 1410 of 1980 MHz for ") and span.describe().endswith("power cap")


FELL = ClockSpan(1980, 1410, 0.8, 1.2, 60, POWER_CAP)
FULL = ClockSpan(1980, 1980, 0.0, 1.2, 60, POWER_CAP)


class ClockWatch(FakeWatch):
    """A watch whose traces give, side after side, the spans of `plan` (then FULL)."""

    def __init__(self, plan: list[ClockSpan]):
        super().__init__([])
        self.plan = list(plan)

    def trace(self):
        span = self.plan.pop(0) if self.plan else FULL
        return type("T", (), {"stop": lambda _self: [span]})()


def spans_for(orders_first: str, fell: dict[Role, set[int]], rounds: int) -> list[ClockSpan]:
    """Spans in timing order for rounds alternating from `orders_first`, FELL where `fell[role]` names the round."""
    order = clean_rounds.balanced_orders(rounds, orders_first == "CB")
    out = []
    for i, o in enumerate(order):
        for role in (Role.CANDIDATE, Role.BEST) if o == "CB" else (Role.BEST, Role.CANDIDATE):
            out.append(FELL if i in fell.get(role, set()) else FULL)
    return out


def segment_with(fell: dict[Role, set[int]], rounds: int = 8) -> SegmentRecord:
    rng = random.Random(5)
    first = "CB" if random.Random(5).random() < 0.5 else "BC"  # SegmentRun's first draw
    pair, _ = fake_pair()
    return run_segment(pair, 0, ("p",), 1, rounds, 0, rng, watch=ClockWatch(spans_for(first, fell, rounds + 4)))


def test_a_round_in_which_the_bests_clock_fell_is_excluded_and_replaced() -> None:
    seg = segment_with({Role.BEST: {1}})
    assert len(seg.cand_s) == 8 and len(seg.rounds) == 9
    assert [r.index for r in seg.rounds if r.excluded] == [1]
    assert seg.rounds[1].clock_lines() == ["best: SM clock 1410 of 1980 MHz for 0.80 s of 1.20 s; power cap"]
    assert seg.rounds[1].sides.best.seconds == 0.2  # the excluded round's times stay in the record
    assert seg.rounds[2].order == seg.rounds[1].order  # the replacement keeps the balanced order
    line = rounds_summary(seg.rounds) or ""
    assert "SM clock fell in 1 (lowest 1410 of 1980 MHz" in line and "1 excluded and replaced" in line
    back = SegmentRecord.from_dict(seg.to_dict())
    assert back.rounds[1].excluded and back.rounds[1].sides.best.clock == [FELL]


def test_a_fall_on_the_candidates_side_alone_keeps_the_round() -> None:
    seg = segment_with({Role.CANDIDATE: {2}})
    assert len(seg.rounds) == 8 and not any(r.excluded for r in seg.rounds)
    assert seg.rounds[2].flagged and "0 excluded and replaced" in (rounds_summary(seg.rounds) or "")


def test_flags_without_a_fall_exclude_nothing_and_say_so() -> None:
    seg = segment_with({})
    assert not any(r.excluded for r in seg.rounds) and all(r.flagged for r in seg.rounds)  # power cap at 1980
    line = rounds_summary(seg.rounds) or ""
    assert line.startswith("8 of 8 timed rounds flagged (power cap") and "at its maximum throughout" in line


def test_at_most_a_quarter_of_the_rounds_are_excluded() -> None:
    seg = segment_with({Role.BEST: set(range(20))}, rounds=8)
    excluded = [r for r in seg.rounds if r.excluded]
    assert len(seg.cand_s) == 8 and 1 <= len(excluded) <= len(seg.rounds) // 4
    assert all(r.flagged for r in seg.rounds)


def test_a_record_without_clock_traces_reads_as_before() -> None:
    r = RoundRecord.from_dict({"index": 0, "order": "CB", "sides": {"cand": {"start": 0, "end": 1}}}, 0)
    assert not r.excluded and r.sides.candidate.clock == [] and not r.flagged
