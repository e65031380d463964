"""The timed pair's cores are the harness's: a worker is pinned before its side's code is imported, re-pinned
before each timed generate, and its threads' affinity is read from /proc after it; a side found off the timed
cores is recorded (and discarded by the verdict). Real processes for the /proc reading, fake workers otherwise."""

from __future__ import annotations

import os
import random
import threading

import pytest

from dit_ar_contract.sides import Sides
from pytest_dit_ar.loop.speed.pairs import Pair, boot
from pytest_dit_ar.loop.speed.segment import run_segment
from pytest_dit_ar.state.perf_record import SegmentRecord
from pytest_dit_ar.worker.processes import AffinityWatch, affinity_escapes, pin_threads
from tests.unit.test_clean_rounds import FakeWorker

CORES = sorted(os.sched_getaffinity(0))


@pytest.mark.skipif(len(CORES) < 2, reason="needs two cores to move a thread between")
def test_a_thread_moved_off_the_timed_core_is_found_from_proc() -> None:
    """This process stands in for a worker (the unit tier starts no subprocess): every thread pinned, then one
    thread moves itself, as a candidate calling sched_setaffinity would."""
    me, done = os.getpid(), threading.Event()
    worker = threading.Thread(target=done.wait, daemon=True)
    worker.start()
    try:
        pin_threads([me], [CORES[0]])
        assert affinity_escapes([me], [CORES[0]]) == []
        os.sched_setaffinity(worker.native_id, set(CORES[:2]))
        found = affinity_escapes([me], [CORES[0]])
        assert len(found) == 1 and f"thread {worker.native_id} " in found[0] and str(CORES[:2]) in found[0]
        assert affinity_escapes([999_999_999], [CORES[0]]) == []  # a process that is gone is skipped
    finally:
        pin_threads([me], CORES)
        done.set()


@pytest.mark.skipif(len(CORES) < 2, reason="needs two cores to move a thread between")
def test_a_thread_that_widens_its_affinity_and_restores_it_within_the_round_is_seen() -> None:
    """What a candidate could do to escape a check made only after its round: widen at the start of its generate,
    restore before replying. The watch reads /proc while the round runs."""
    me, moved, restored = os.getpid(), threading.Event(), threading.Event()

    def candidate() -> None:
        os.sched_setaffinity(0, set(CORES[:2]))
        moved.set()
        restored.wait(5)

    thread = threading.Thread(target=candidate, daemon=True)
    try:
        pin_threads([me], [CORES[0]])
        with AffinityWatch(lambda: [me], [CORES[0]], period_s=0.01) as seen:
            thread.start()
            moved.wait(5)
            threading.Event().wait(0.1)  # the round goes on for a while on the wider set
            os.sched_setaffinity(thread.native_id, {CORES[0]})  # ... and is put back before the reply
        assert affinity_escapes([me], [CORES[0]]) == []  # an after-the-round check alone sees nothing
        assert seen.found and f"thread {thread.native_id} " in seen.found[0]
    finally:
        restored.set()
        pin_threads([me], CORES)


class PinnedFake(FakeWorker):
    """A fake worker that records pins and reports escapes after a set number of timed generates."""

    def __init__(self, *args, escape_after: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.pins: list[list[int] | None] = []
        self.escape_after, self.generated = escape_after, 0
        self.calls: list[str] = []

    def pin(self, cores):
        self.pins.append(cores)
        self.calls.append("pin")

    def generate(self, requests, resolution=None):
        self.generated += 1
        return super().generate(requests, resolution)

    def affinity_watch(self, cores):
        worker = self

        class Watch:
            found: list[str] = []

            def __enter__(self):
                return self

            def __exit__(self, *_):
                if worker.escape_after is not None and worker.generated > worker.escape_after:
                    self.found = [f"thread 7 of process {worker.pid} on cores [0, 1]"]

        return Watch()

    def handshake(self):
        self.calls.append("handshake")

    def request(self, op, **_):
        self.calls.append(op)


def pinned_pair(escape_after: int | None = None) -> Pair:
    log: list = []
    frozen = {"cand": False, "best": False}
    return Pair(PinnedFake("cand", log, frozen, 0.1, escape_after=escape_after),  # type: ignore[arg-type]
                PinnedFake("best", log, frozen, 0.2), Sides(0.5, 0.5))


def test_boot_pins_the_worker_before_build_imports_its_code() -> None:
    worker = PinnedFake("cand", [], {"cand": False, "best": True}, 0.1)
    boot(worker, {"steps": 1}, (3,))  # type: ignore[arg-type]
    assert worker.calls == ["handshake", "pin", "build"] and worker.pins == [[3]]


def test_every_timed_generate_is_re_pinned_and_a_clean_segment_records_no_escape() -> None:
    pair = pinned_pair()
    seg = run_segment(pair, 0, ("p",), 1, 4, 1, random.Random(0), cores=(3,))
    assert seg.escaped == []
    assert pair.cand.pins.count([3]) >= 4 and pair.best.pins.count([3]) >= 4  # type: ignore[attr-defined]


def test_a_side_that_leaves_the_timed_core_is_recorded_and_survives_the_record() -> None:
    pair = pinned_pair(escape_after=2)  # the candidate moves a thread after its warm-up and first timed round
    seg = run_segment(pair, 0, ("p",), 1, 4, 1, random.Random(0), cores=(3,))
    assert seg.escaped and all(": cand: thread 7" in e for e in seg.escaped)
    again = SegmentRecord.from_dict(seg.to_dict())
    assert again.escaped == seg.escaped
    assert "escaped" not in SegmentRecord(0, [0.1] * 4, [0.1] * 4).to_dict()  # older records read the same


def test_unpinned_segments_check_nothing() -> None:
    pair = pinned_pair(escape_after=0)
    seg = run_segment(pair, 0, ("p",), 1, 4, 1, random.Random(0))
    assert seg.escaped == [] and pair.cand.pins == []  # type: ignore[attr-defined]
