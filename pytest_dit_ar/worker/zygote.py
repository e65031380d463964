"""The fork server (zygote) of one side: pays for the fixed prelude once, then forks one worker per pair.

Runs inside its side's sandbox as `python -I -c ZYGOTE_BOOTSTRAP --root R ...`, started by
`worker.forkserver.Zygote`. Its stdin is a SOCK_SEQPACKET Unix socket to the harness: one request per
message, JSON, with the new worker's file descriptors (stdin, stdout, log) attached (SCM_RIGHTS).

Every exec'd worker is the same program with the same command line (`worker.client.WorkerProcess`): its stdin is
the request pipe instead of a socket, and it is a fork server that forks exactly one worker, on its own stdin,
stdout and stderr (`solo`), then waits for it. So an exec'd worker and a fork server's child are the same kind of
process (a child of the prelude process, with the same command line, environment, modules and descriptors), and
nothing in a worker's own view tells which of the two it is (docs/design/sandbox-and-security.md).

The prelude is fixed harness code only: torch, diffusers' model and scheduler classes, the quality suite's
audit and the worker server. CUDA is never initialised here (`PYTORCH_NVML_BASED_CUDA_CHECK=1`; nothing
calls `torch.cuda.*`): a CUDA context does not survive `fork`. The side's `model_under_test` is imported
only in the child, by the worker server's `build`, exactly as in an exec'd worker.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import signal
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Any

from . import protocol

NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
MAX_MESSAGE = 1 << 16
# Fixed library code the published pipelines build from, imported once here instead of in every worker's
# build (diffusers and transformers load their submodules on attribute access). Harness-chosen, never the
# candidate's: a name missing from an installed version is skipped.
FORK_PRELOAD = (("diffusers", ("AutoencoderKL", "DiTTransformer2DModel", "PixArtTransformer2DModel",
                               "DDIMScheduler", "DPMSolverMultistepScheduler")),
                ("transformers", ("T5Config", "T5EncoderModel")),
                ("safetensors.torch", ("save_file", "load_file")),
                ("torch.nn.attention", ("sdpa_kernel",)))
# Also torch.compile's own stack (Dynamo and Inductor; ~1-2 s of imports), which a compiled candidate's forked
# worker would otherwise import in its build, on every lane: every worker imports it before its hello
# (worker/server.py PRELOAD), so its host memory is the same on both sides and the memory guardrail compares
# what they run. Importing it touches no CUDA.
COMPILE_PRELOAD = (("torch._dynamo", ()), ("torch._inductor.compile_fx", ()))


def preload_names(device: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """What the prelude imports for a lane on `device` (the compile stack included on every lane)."""
    return FORK_PRELOAD + COMPILE_PRELOAD


def prelude(device: str = "cpu") -> None:
    """Import what every worker imports before its hello, without touching the GPU."""
    os.environ[NVML_CHECK] = "1"  # torch.cuda.is_available() through NVML, never through a CUDA context
    import torch  # noqa: F401

    from . import server

    server.preload()
    for module, names in preload_names(device):
        try:
            loaded = importlib.import_module(module)
        except ImportError:
            continue
        for name in names:
            getattr(loaded, name, None)


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    """One message to the harness; a closed peer is not an error here (the harness has gone, or, in an exec'd
    worker, the peer is the process's own request, closed once sent): the next read ends the loop."""
    try:
        sock.send(json.dumps(message).encode("utf-8"))
    except OSError:
        pass


def _die_with_parent() -> None:
    """The child dies with its fork server (an exec'd worker's prelude process killed unsandboxed)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def child(fds: list[int], sock: socket.socket, request: dict[str, Any], forked_at: float) -> int:
    """In the forked child: take over the harness's pipes and the log, then run the worker server."""
    sock.close()
    _die_with_parent()
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the candidate may wait for processes it starts
    sys.stdin = os.fdopen(0, "r", encoding="utf-8", closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, encoding="utf-8", closefd=False)
    from . import server

    return server.run(Path(request["root"]), request["device"], int(request["threads"]), request.get("cap_gb"),
                      forked_at)


def serve(sock: socket.socket, args: argparse.Namespace) -> None:
    """Answer fork requests until `exit` or the harness closes the socket."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel; the harness watches them
    forks = 0
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3)
        except OSError:
            return
        if not data:
            return
        request = json.loads(data)
        if request.get("op") == "exit":
            return
        if request.get("op") == "state":  # what a harness adopting a pre-started server asks first (worker/warm.py)
            for fd in fds:
                os.close(fd)
            send(sock, {"ok": True, "pid": os.getpid(), "forks": forks, "nonce": request.get("nonce")})
            continue
        if request.get("op") != "fork" or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            send(sock, {"ok": False, "error": f"a fork request carries 3 descriptors, got {request!r}"})
            continue
        request = {"root": str(args.root), "device": args.device, "threads": args.threads,
                   "cap_gb": args.cap_gb, **request}
        forked_at = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns here
            code = 1
            try:
                code = child(fds, sock, request, forked_at)
            finally:
                os._exit(code)
        forks += 1
        for fd in fds:
            os.close(fd)
        send(sock, {"ok": True, "pid": pid})


def control() -> tuple[socket.socket, bool]:
    """The socket fork requests come on, and whether this is an exec'd worker (`solo`): a fork server's stdin
    is the harness's socket; an exec'd worker's is its request pipe, so it sends itself one fork request carrying
    its own stdin, stdout and stderr over a socket pair, and the harness's requests reach its one child. Either
    way fd 0 is /dev/null afterwards, so a child's dup2 finds the usual layout."""
    if stat.S_ISSOCK(os.fstat(0).st_mode):
        sock = socket.socket(fileno=os.dup(0))
        solo = False
    else:
        sock, own = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        socket.send_fds(own, [json.dumps({"op": "fork"}).encode()], [0, 1, 2])
        own.close()  # the one request sent: the next read ends the loop
        solo = True
    os.close(0)
    os.open(os.devnull, os.O_RDONLY)
    return sock, solo


def wait_children() -> None:
    """Wait until every child has ended (they are reaped by the kernel: the wait ends when none is left)."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(prog="pytest_dit_ar.worker.zygote")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cap-gb", type=float, default=None)
    args = parser.parse_args(argv)
    sock, solo = control()
    try:
        prelude(args.device)
        if "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized():
            raise RuntimeError("the prelude initialised CUDA, which does not survive fork")
    except BaseException as exc:  # reported to the harness: it refuses the fork server; an exec'd worker crashed
        failed = {"ok": False, "kind": "exception", "error": f"{type(exc).__name__}: {exc}"}
        if solo:
            os.write(1, protocol.encode(failed))
        else:
            send(sock, failed)
        return 1
    if not solo:
        send(sock, {"ok": True, "protocol": protocol.VERSION, "pid": os.getpid(),
                    "prelude_s": time.perf_counter() - started})
    serve(sock, args)
    sys.stderr.flush()
    if solo:  # the exec'd worker's sandbox lives while its one child does
        os.close(1)
        wait_children()
    os._exit(0)  # nothing to finalise: the interpreter's shutdown of torch took seconds under load


if __name__ == "__main__":
    sys.exit(main())
