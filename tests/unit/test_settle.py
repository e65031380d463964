"""Queued GPU work cannot outlive a side's reply (issue 25, the statistical review's stream finding): the
worker synchronises every visible GPU, all streams, after each request and before it writes the reply, so
the harness's round trip includes whatever the side queued on a stream of its own, and nothing of it is
left running when the other side is timed. Tested with a stand-in for torch (no GPU here)."""

from __future__ import annotations

import contextlib
import io
import json
from types import SimpleNamespace

from pytest_dit_ar.worker import server


class Events(list):
    def write(self, text: str) -> None:
        self.append(("reply", json.loads(text)))

    def flush(self) -> None:
        pass


def fake_torch(events: Events, initialised: bool = True, devices: int = 2) -> SimpleNamespace:
    current = [0]

    @contextlib.contextmanager
    def device(index: int):
        current[0] = index
        yield

    cuda = SimpleNamespace(is_initialized=lambda: initialised, device_count=lambda: devices, device=device,
                           synchronize=lambda: events.append(("synchronize", current[0])))
    return SimpleNamespace(cuda=cuda)


def worker(events: Events, torch: SimpleNamespace, fail: bool = False) -> SimpleNamespace:
    def generate(**_: object) -> dict:
        events.append(("generate", None))
        if fail:
            raise RuntimeError("the candidate raised")
        return {"outputs": []}

    noop = lambda **_: {}  # noqa: E731
    return SimpleNamespace(torch=torch, build=noop, generate=generate, activation_dtypes=noop, profile=noop,
                           flops=noop, peak=noop)


def test_every_gpu_is_synchronised_after_the_request_and_before_the_reply() -> None:
    events = Events()
    server.serve(worker(events, fake_torch(events)), events, io.StringIO('{"op": "generate"}\n'))
    assert [e[0] for e in events] == ["generate", "synchronize", "synchronize", "reply"]
    assert [e[1] for e in events if e[0] == "synchronize"] == [0, 1]
    assert events[-1][1]["ok"] is True


def test_a_failing_request_is_synchronised_too() -> None:
    events = Events()
    server.serve(worker(events, fake_torch(events), fail=True), events, io.StringIO('{"op": "generate"}\n'))
    assert [e[0] for e in events] == ["generate", "synchronize", "synchronize", "reply"]
    assert events[-1][1]["ok"] is False


def test_a_worker_that_never_touched_the_gpu_is_not_synchronised() -> None:
    events = Events()
    server.serve(worker(events, fake_torch(events, initialised=False)), events, io.StringIO('{"op": "generate"}\n'))
    assert [e[0] for e in events] == ["generate", "reply"]
