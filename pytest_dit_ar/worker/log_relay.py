"""A worker's output, relayed by the harness into the worker's log, up to a cap.

A worker (and a fork server) gets a pipe as its stdout and stderr, never a file: the log's name says the side and
the phase (`worker-best-segment1.log`), and a file descriptor's target is readable from inside the sandbox
(`readlink /proc/self/fd/2`). A thread of the harness (`LogRelay`) drains each pipe as it fills and appends what it
reads to the role-named log on the host, at most `LogBook.cap_bytes` per worker; past the cap it keeps reading and
drops the rest, so a worker never waits on a full pipe, and one that floods costs the harness only the reads. The
other side is frozen while one side is timed, so a flood can only slow the side that floods (its relay thread reads
while that side runs). A cut log ends with `CUT_LINE`, and the launcher's `LogBook` lists every cut log for the run
record (`experiment.json`'s `logs`) and the summary.
"""

from __future__ import annotations

import fcntl
import os
import struct
import termios
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_LOG_MB = 4.0  # performance.worker_log_mb's default: what one worker may write into its log
CHUNK = 1 << 20
CUT_LINE = "\n[dit-ar: this worker's output passed the cap of {mb:g} MiB per worker (performance.worker_log_mb); " \
           "the rest was read and dropped]\n"
SETTLE_S = 1.0  # how long a reader of a log waits for its relay to write what is already in the pipe


@dataclass(frozen=True)
class LogCut:
    """One log cut at the cap: its file name and how many bytes of the worker's output were dropped."""

    name: str
    dropped_bytes: int


@dataclass
class LogBook:
    """The cap of every worker log of one launcher, and the logs cut so far (shared by its relay threads)."""

    cap_bytes: int = int(DEFAULT_LOG_MB * 2**20)
    cuts: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def of_mb(cls, mb: float) -> LogBook:
        return cls(int(mb * 2**20))

    def relay(self, path: Path) -> LogRelay:
        """A new relay into `path` (its pipe made, its thread not started)."""
        return LogRelay(path, self)

    def note_cut(self, path: Path, dropped: int) -> None:
        with self._lock:
            self.cuts[path.name] = dropped

    def cut(self) -> tuple[LogCut, ...]:
        """The logs cut at the cap so far, by name."""
        with self._lock:
            return tuple(LogCut(name, dropped) for name, dropped in sorted(self.cuts.items()))


_LIVE: dict[Path, LogRelay] = {}  # the relays still running, by log path (a reader of a log settles its relay)
_LIVE_LOCK = threading.Lock()


class LogRelay:
    """One worker's output pipe and the harness thread that appends it to the worker's log, up to the book's cap.

    `write_fd` goes to the worker (its stdout and stderr, or a forked worker's log descriptor); call `handed_over`
    once the worker has its copy, so that the pipe ends when the worker and everything it started are gone."""

    def __init__(self, path: Path, book: LogBook):
        self.path, self.book = path, book
        self.read_fd, self.write_fd = os.pipe()  # both close-on-exec: only the worker's descriptors carry the pipe
        self.written = 0
        self.dropped = 0
        self._busy = False  # a chunk read and not yet written
        self._thread = threading.Thread(target=self._drain, name="dit-ar-log-relay", daemon=True)

    def start(self) -> LogRelay:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _LIVE_LOCK:
            _LIVE[self.path] = self
        self._thread.start()
        return self

    def handed_over(self) -> None:
        """Close the harness's copy of the write end (the worker holds its own)."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def _drain(self) -> None:
        try:
            with open(self.path, "ab", buffering=0) as log:
                while True:
                    chunk = os.read(self.read_fd, CHUNK)
                    if not chunk:
                        break
                    self._busy = True
                    self._keep(log, chunk)
                    self._busy = False
        except OSError:
            pass
        finally:
            os.close(self.read_fd)
            with _LIVE_LOCK:
                if _LIVE.get(self.path) is self:
                    del _LIVE[self.path]

    def _keep(self, log, chunk: bytes) -> None:  # noqa: ANN001 - a raw binary file
        room = self.book.cap_bytes - self.written
        if room > 0:
            log.write(chunk[:room])
            self.written += min(room, len(chunk))
        if len(chunk) > room:
            first = self.dropped == 0
            self.dropped += len(chunk) - max(room, 0)
            if first:
                log.write(CUT_LINE.format(mb=self.book.cap_bytes / 2**20).encode())
            self.book.note_cut(self.path, self.dropped)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def pending(self) -> int:
        """Bytes in the pipe not read yet (FIONREAD); 0 once the relay has ended."""
        if not self.running:
            return 0
        try:
            return struct.unpack("i", fcntl.ioctl(self.read_fd, termios.FIONREAD, b"\0\0\0\0"))[0]
        except OSError:
            return 0

    def settle(self, timeout_s: float = SETTLE_S) -> None:
        """Wait (bounded) until what the worker wrote so far is in the log."""
        deadline = time.monotonic() + timeout_s
        quiet = 0
        while quiet < 2 and self.running and time.monotonic() < deadline:
            quiet = quiet + 1 if not (self.pending() or self._busy) else 0
            time.sleep(0.002)

    def join(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) for the relay to end: the worker and whatever it started have closed the pipe."""
        self.handed_over()
        self._thread.join(timeout_s)


def settle(path: Path) -> None:
    """Let the running relay of `path`, if any, write what is in its pipe (before the log is read)."""
    with _LIVE_LOCK:
        relay = _LIVE.get(path)
    if relay is not None:
        relay.settle()
