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

    sync = lambda: events.append(("synchronize", current[0]))  # noqa: E731
    cuda = SimpleNamespace(is_initialized=lambda: initialised, device_count=lambda: devices, device=device,
                           synchronize=sync)
    return SimpleNamespace(cuda=cuda, _C=SimpleNamespace(_cuda_synchronize=sync))


def worker(events: Events, torch: SimpleNamespace, fail: bool = False) -> SimpleNamespace:
    def generate(**_: object) -> dict:
        events.append(("generate", None))
        if fail:
            raise RuntimeError("the candidate raised")
        return {"outputs": []}

    noop = lambda **_: {}  # noqa: E731
    return SimpleNamespace(torch=torch, settle=server.DeviceSync(torch), build=noop, generate=generate,
                           activation_dtypes=noop, profile=noop, flops=noop, peak=noop)


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


def test_a_candidate_that_patches_the_sync_after_the_worker_started_changes_nothing() -> None:
    """The sync is bound before the candidate is imported: replacing torch.cuda.synchronize, the native
    function behind it and torch.cuda.is_initialized later still leaves every GPU synchronised."""
    events = Events()
    torch = fake_torch(events)
    side = worker(events, torch)
    server.serve(side, events, io.StringIO('{"op": "build"}\n'))  # CUDA seen initialised once
    torch.cuda.synchronize = torch._C._cuda_synchronize = lambda: events.append(("patched", None))
    torch.cuda.is_initialized = lambda: False
    events.clear()
    server.serve(side, events, io.StringIO('{"op": "generate"}\n'))
    assert [e[0] for e in events] == ["generate", "synchronize", "synchronize", "reply"]
