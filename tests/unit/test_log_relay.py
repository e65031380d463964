"""The relay of a worker's output into its log (worker/log_relay.py): capped, never a full pipe for the worker, and a
flood on one relay does not hold up another's (threads and pipes in this process, no subprocess)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from pytest_dit_ar.worker import log_relay
from pytest_dit_ar.worker.log_relay import CUT_LINE, LogBook


def flood(fd: int, total: int, chunk: int = 1 << 16) -> float:
    """Write `total` bytes into `fd` as fast as the pipe takes them, close it; the seconds it took."""
    t0 = time.perf_counter()
    block = b"x" * chunk
    sent = 0
    while sent < total:
        sent += os.write(fd, block[:min(chunk, total - sent)])
    os.close(fd)
    return time.perf_counter() - t0


def test_a_log_stops_at_the_cap_and_says_so(tmp_path: Path) -> None:
    book = LogBook(cap_bytes=1 << 20)
    relay = book.relay(tmp_path / "worker-candidate-quality.log").start()
    writer, relay.write_fd = os.dup(relay.write_fd), relay.write_fd
    relay.handed_over()
    flood(writer, 8 << 20)
    relay.join(10)
    text = (tmp_path / "worker-candidate-quality.log").read_bytes()
    cut = CUT_LINE.format(mb=1).encode()
    assert len(text) == (1 << 20) + len(cut) and text.endswith(cut)
    assert relay.dropped == 7 << 20 and not relay.running
    assert book.cut() == (log_relay.LogCut("worker-candidate-quality.log", 7 << 20),)


def test_a_log_under_the_cap_is_whole_and_not_listed(tmp_path: Path) -> None:
    book = LogBook(cap_bytes=1 << 20)
    relay = book.relay(tmp_path / "w.log").start()
    os.write(relay.write_fd, b"a line\n")
    relay.join(5)
    assert (tmp_path / "w.log").read_bytes() == b"a line\n" and book.cut() == ()


def test_a_flood_never_waits_on_a_full_pipe_and_another_log_keeps_its_pace(tmp_path: Path) -> None:
    """One worker writes 256 MiB (the red team's flood) past a 1 MiB cap while another writes a line every 10 ms:
    the flooder's writes all go through (the relay drains and drops), and each of the other's lines reaches its log
    within a bound, as without the flood."""
    book = LogBook(cap_bytes=1 << 20)
    loud, quiet = book.relay(tmp_path / "loud.log").start(), book.relay(tmp_path / "quiet.log").start()
    loud_fd = os.dup(loud.write_fd)
    loud.handed_over()
    took: list[float] = []
    flooder = threading.Thread(target=lambda: took.append(flood(loud_fd, 256 << 20)))
    flooder.start()
    waits = []
    for i in range(20):
        os.write(quiet.write_fd, f"line {i}\n".encode())
        t0 = time.perf_counter()
        while (tmp_path / "quiet.log").read_bytes().count(b"\n") < i + 1:
            time.sleep(0.001)
        waits.append(time.perf_counter() - t0)
        time.sleep(0.01)
    flooder.join(60)
    quiet.join(5)
    loud.join(10)
    assert took and not flooder.is_alive()  # every byte written: the flooder never blocked for good
    assert max(waits) < 0.5, waits
    assert (tmp_path / "loud.log").stat().st_size < (1 << 20) + 200
    assert [c.name for c in book.cut()] == ["loud.log"]


def test_reading_a_log_first_lets_its_relay_write_what_is_in_the_pipe(tmp_path: Path) -> None:
    from pytest_dit_ar.worker.outputs import log_tail

    relay = LogBook().relay(tmp_path / "w.log").start()
    os.write(relay.write_fd, b"Traceback: the last words\n")
    assert log_tail(tmp_path / "w.log").endswith("the last words")
    relay.join(5)


def test_the_cap_is_a_lane_setting_with_a_default() -> None:
    from dit_ar_contract.config import PerfProtocol

    assert PerfProtocol().worker_log_mb == log_relay.DEFAULT_LOG_MB
    assert LogBook.of_mb(0.5).cap_bytes == 1 << 19
