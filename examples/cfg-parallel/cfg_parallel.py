"""CFG-parallel denoising: the two halves of classifier-free guidance on two devices at the same time.

Classifier-free guidance evaluates the denoiser twice per sampling step on the same latents, once with the
condition and once with the null condition, and combines the two noise predictions as
``uncond + g * (cond - uncond)``. The two evaluations do not depend on each other, so two devices can run
them at once: rank 0 (the caller's own process and device) computes the conditional half, rank 1 (a helper
process started once, on a second device) the unconditional half, and rank 0 combines them with the same
formula. Each half is exactly the pass one device runs when it evaluates the two halves one after the other,
so on two devices of one kind the guided prediction should equal the single-device two-pass prediction bit
for bit (checked on the CPU, not yet on GPUs), and the batched single-device prediction up to GEMM
reduction order.

What travels where:

* control (start a step, stop, errors) over a ``multiprocessing`` pipe;
* tensors over ``torch.distributed`` point-to-point ``send``/``recv``: the backend is ``nccl`` when the
  devices are CUDA GPUs and ``gloo`` on the CPU (tests); the rendezvous is a file in a private temporary
  folder, so no port is chosen and nothing listens beyond what the backend itself opens;
* weights once, at start-up: the helper builds its own copy of the denoiser through a picklable *factory*
  and then receives every tensor of rank 0's ``state_dict`` by broadcast, so both copies hold the same bits
  whatever the second device's random number generator would have drawn.

Lifetime: :class:`CFGParallel` starts the helper (``spawn``, which is safe with CUDA; like every spawn start,
it imports the parent's main module again, so a script that builds the pipeline at top level needs an
``if __name__ == "__main__":`` guard; the worker's server module has one), waits until it is
ready, synchronises the weights and opens the point-to-point channel once, so nothing of the start-up is left
for the first timed step. The helper exits on :meth:`CFGParallel.close` (registered with ``atexit`` too),
when its pipe to rank 0 breaks, and when the process that started it dies. One helper per process: it owns
the process's default ``torch.distributed`` group, and starting a second one shuts the first one down. A step
that fails half-way shuts the helper down, so the channel is never reused out of step; but if the helper dies
in the middle of a step, rank 0's receive waits for the backend to notice (gloo: at once, the connection
closes; NCCL: up to ``timeout_s``).

The module imports nothing but torch and the standard library (diffusers only inside :class:`DiTFromConfig`);
``examples/cfg-parallel/make_patch.py`` copies it into ``model_under_test/``.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import importlib
import multiprocessing
import multiprocessing.connection
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

# dtypes a step may carry, sent over the pipe by position
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32)

_IN_HELPER = False  # True inside rank 1: a pipeline built there must not start a helper of its own
_ACTIVE: CFGParallel | None = None


def in_helper() -> bool:
    """Whether this process is a CFG-parallel helper (rank 1)."""
    return _IN_HELPER


def backend_for(device: torch.device | str) -> str:
    """``nccl`` for CUDA devices, ``gloo`` for the CPU."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def devices_for(device: torch.device | str, helper: torch.device | str | None = None) -> tuple[torch.device, torch.device]:
    """Rank 0's device (with its index resolved) and the helper's: the next visible GPU, or the CPU again."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if helper is not None:
        other = torch.device(helper)
    elif device.type == "cuda":
        count = torch.cuda.device_count()
        if count < 2:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
            raise RuntimeError(f"CFG-parallel needs two visible CUDA devices; {count} visible "
                               f"(CUDA_VISIBLE_DEVICES={visible})")
        other = torch.device("cuda", (device.index + 1) % count)
    else:
        other = device
    if backend_for(other) != backend_for(device):
        raise ValueError(f"rank 0 on {device} and the helper on {other} need the same backend")
    if other.type == "cuda" and other.index is None:
        raise ValueError(f"name the helper's GPU with its index, not {other}")
    if other.type == "cuda" and other == device:
        raise ValueError(f"the helper needs a GPU of its own, not rank 0's {device}")
    return device, other


@dataclass
class HalfDenoiser:
    """What the helper serves: ``module`` receives rank 0's weights; ``predict(x, t)`` is the unconditional
    noise prediction for latents ``x`` at timestep ``t`` (a 0-dim tensor)."""

    module: torch.nn.Module | None
    predict: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def dit_noise(model: torch.nn.Module, x: torch.Tensor, t: torch.Tensor, labels: torch.Tensor,
              channels: int) -> torch.Tensor:
    """The noise half of a DiT prediction, computed as ``ClassConditionalPipeline.predict_noise`` does."""
    t = t if torch.is_tensor(t) else torch.tensor([t])
    t = t[None] if t.ndim == 0 else t
    out = model(x.to(model.dtype), timestep=t.to(x.device).expand(x.shape[0]), class_labels=labels).sample
    return out[:, :channels].float()


class DiTFromConfig:
    """Factory: a diffusers ``DiTTransformer2DModel`` built from its config on the helper's device (the
    weights it draws are overwritten by rank 0's), serving the null-class prediction."""

    def __init__(self, config: dict, dtype: str = "float32", seed: int = 0):
        self.config, self.dtype, self.seed = dict(config), dtype, int(seed)

    def __call__(self, device: torch.device) -> HalfDenoiser:
        from diffusers import DiTTransformer2DModel

        torch.manual_seed(self.seed)
        model = DiTTransformer2DModel.from_config(self.config).to(device).eval().requires_grad_(False)
        if getattr(torch, self.dtype) != model.dtype:
            model = model.to(getattr(torch, self.dtype))
        null, channels = int(model.config.num_embeds_ada_norm), int(model.config.in_channels)

        def predict(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            labels = torch.full((x.shape[0],), null, dtype=torch.long, device=x.device)
            return dit_noise(model, x, t, labels, channels)

        return HalfDenoiser(model, predict)


class PipelineFromSpec:
    """Factory: the candidate's own class-conditional pipeline, built again on the helper's device from the
    same spec (so whatever the candidate does to its transformer at build time happens there too), serving
    ``pipe.predict_noise`` with the null class."""

    def __init__(self, spec: dict, package: str | None = None):
        self.spec = dict(spec)
        self.package = package or __name__.rpartition(".")[0]
        if not self.package:
            raise ValueError("PipelineFromSpec needs the package that holds build_pipeline")

    def __call__(self, device: torch.device) -> HalfDenoiser:
        spec = dict(self.spec, device=str(device))
        pipe = importlib.import_module(self.package).build_pipeline(spec)
        null = int(pipe.null_class)

        def predict(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            labels = torch.full((x.shape[0],), null, dtype=torch.long, device=pipe.device)
            return pipe.predict_noise(x, t, labels)

        return HalfDenoiser(pipe.transformer, predict)


class CFGParallel:
    """Rank 0's side: starts the helper once, then evaluates one guided prediction per call.

    ``factory(device) -> HalfDenoiser`` runs in the helper and must be picklable (a module-level class or
    function). ``module`` is rank 0's denoiser; its ``state_dict`` is broadcast to the helper's copy, which
    must have the same keys, shapes and dtypes (``None``: the factory alone decides the helper's weights).
    """

    def __init__(self, factory: Callable[[torch.device], HalfDenoiser], module: torch.nn.Module | None, *,
                 device: torch.device | str, helper_device: torch.device | str | None = None,
                 timeout_s: float = 600.0):
        global _ACTIVE
        if _IN_HELPER:
            raise RuntimeError("a CFG-parallel helper does not start helpers of its own")
        if _ACTIVE is not None:
            _ACTIVE.close()
        if dist.is_initialized():
            raise RuntimeError("this process already has a default torch.distributed group; CFG-parallel needs "
                               "its own")
        self.device, self.helper_device = devices_for(device, helper_device)
        self.backend = backend_for(self.device)
        self.timeout_s = float(timeout_s)
        self._closed = False
        self._folder = tempfile.mkdtemp(prefix="cfg-parallel-")
        init = Path(self._folder, "rendezvous").as_uri()
        context = multiprocessing.get_context("spawn")
        self._conn, child_end = context.Pipe()
        self._proc = context.Process(
            target=_helper_main, name="cfg-parallel-rank1", daemon=True,
            args=(factory, str(self.helper_device), init, torch.get_num_threads(), child_end, self.timeout_s,
                  str(Path(__file__).resolve())))
        atexit.register(self.close)
        _ACTIVE = self
        try:
            with _importable_in_children():
                self._proc.start()
            child_end.close()
            self._expect("ready")
            _init_group(0, self.device, init, self.timeout_s)
            self._conn.send(("weights", _schema(module)))
            self._expect("weights ok")
            _broadcast_weights(module)
            _exchange_once(0, self.device)  # opens the point-to-point channel before any timed step
        except BaseException:
            self.close()
            raise

    @property
    def helper_pid(self) -> int | None:
        return self._proc.pid

    @property
    def helper_exitcode(self) -> int | None:
        return self._proc.exitcode

    def guided_eps(self, model_input: torch.Tensor, t: torch.Tensor,
                   cond_fn: Callable[[torch.Tensor], torch.Tensor], guidance: float) -> torch.Tensor:
        """``uncond + guidance * (cond - uncond)``: ``cond_fn(model_input)`` here while the helper evaluates
        the unconditional half on its device."""
        if self._closed:
            raise RuntimeError("the CFG-parallel helper has been shut down")
        x = model_input.contiguous()
        tt = torch.as_tensor(t, device=x.device).reshape(1)
        try:
            self._conn.send(("step", tuple(x.shape), DTYPES.index(x.dtype), DTYPES.index(tt.dtype)))
            sent = [dist.isend(x, 1), dist.isend(tt, 1)]
            eps_cond = cond_fn(model_input)
            eps_uncond = torch.empty(eps_cond.shape, dtype=eps_cond.dtype, device=eps_cond.device)
            for work in sent:
                work.wait()
            dist.recv(eps_uncond, 1)
        except BaseException:
            self.close()  # a half-finished exchange leaves the channel out of step: never reuse it
            raise
        return eps_uncond + guidance * (eps_cond - eps_uncond)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the helper (ask, then terminate, then kill) and leave the process group; idempotent."""
        global _ACTIVE
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        with contextlib.suppress(OSError, ValueError):
            self._conn.send(("stop",))
        if self._proc.pid is not None:
            self._proc.join(timeout_s)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(5)
        with contextlib.suppress(OSError):
            self._conn.close()
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        shutil.rmtree(self._folder, ignore_errors=True)
        if _ACTIVE is self:
            _ACTIVE = None

    def _expect(self, kind: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not self._conn.poll(0.1):
            if not self._proc.is_alive():
                raise RuntimeError(f"the CFG-parallel helper exited (code {self._proc.exitcode}) before '{kind}'")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the CFG-parallel helper sent no '{kind}' in {self.timeout_s:g} s")
        try:
            message = self._conn.recv()
        except EOFError:
            self._proc.join(5)
            raise RuntimeError(f"the CFG-parallel helper exited (code {self._proc.exitcode}) before '{kind}'; "
                               "its traceback is on stderr") from None
        if message[0] == "error":
            raise RuntimeError(f"the CFG-parallel helper failed:\n{message[1]}")
        if message[0] != kind:
            raise RuntimeError(f"the CFG-parallel helper sent {message[0]!r}, expected {kind!r}")


# ------------------------------------------------------------------------------------------- both ranks

def _schema(module: torch.nn.Module | None) -> list[tuple[str, tuple[int, ...], str]]:
    if module is None:
        return []
    return [(k, tuple(v.shape), str(v.dtype)) for k, v in module.state_dict().items()]


@torch.no_grad()
def _broadcast_weights(module: torch.nn.Module | None) -> None:
    """Every state_dict tensor from rank 0 into the helper's copy, in place, in state_dict order."""
    if module is None:
        return
    for tensor in module.state_dict().values():
        if tensor.is_contiguous():
            dist.broadcast(tensor, src=0)
        else:
            staged = tensor.contiguous()
            dist.broadcast(staged, src=0)
            tensor.copy_(staged)


def _exchange_once(rank: int, device: torch.device) -> None:
    probe = torch.zeros(1, device=device)
    if rank == 0:
        dist.send(probe, 1)
        dist.recv(probe, 1)
    else:
        dist.recv(probe, 0)
        dist.send(probe, 0)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _init_group(rank: int, device: torch.device, init: str, timeout_s: float) -> None:
    backend = backend_for(device)
    extra: dict[str, Any] = {"device_id": device} if backend == "nccl" else {}
    with _gloo_on_loopback(backend):
        dist.init_process_group(backend, init_method=init, rank=rank, world_size=2,
                                timeout=datetime.timedelta(seconds=timeout_s), **extra)


@contextlib.contextmanager
def _gloo_on_loopback(backend: str):
    """Both ranks live on this machine: let gloo use the loopback interface (a sandbox without a network
    has no other), unless GLOO_SOCKET_IFNAME says otherwise."""
    if backend != "gloo" or "GLOO_SOCKET_IFNAME" in os.environ or not sys.platform.startswith("linux"):
        yield
        return
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    try:
        yield
    finally:
        os.environ.pop("GLOO_SOCKET_IFNAME", None)


@contextlib.contextmanager
def _importable_in_children():
    """The helper unpickles its target and the factory by module name, so this module's top-level package must
    be importable there, and from this very folder (a worker imports model_under_test by file location, and
    another copy may sit on sys.path): spawn hands the child the parent's sys.path as it is at start, so put
    the folder first for the start and take it out again. The helper checks that it got the same file."""
    depth = len(__name__.split("."))
    folder = str(Path(__file__).resolve().parents[depth - 1])
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)  # the first occurrence: the one inserted above


# --------------------------------------------------------------------------------------- rank 1 (helper)

def _exit_with_parent() -> None:
    """Exit at once when the process that started us dies, even while blocked in a collective."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(3)

    threading.Thread(target=watch, name="cfg-parallel-parent-watch", daemon=True).start()


def _helper_main(factory: Callable[[torch.device], HalfDenoiser], device_name: str, init: str, threads: int,
                 conn: multiprocessing.connection.Connection, timeout_s: float, parent_file: str) -> None:
    global _IN_HELPER
    _IN_HELPER = True
    _exit_with_parent()
    try:
        if Path(__file__).resolve() != Path(parent_file):  # another copy of the package came first on sys.path
            raise ImportError(f"the helper imported {__name__} from {__file__}, rank 0 from {parent_file}")
        torch.set_num_threads(threads)
        device = torch.device(device_name)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        half = factory(device)
        conn.send(("ready",))
        _init_group(1, device, init, timeout_s)
        try:
            message = conn.recv()
            if message[0] == "stop":
                return
            schema, mine = message[1], _schema(half.module)
            if message[0] != "weights" or schema != mine:
                differ = [f"{a} vs {b}" for a, b in zip(schema, mine) if a != b][:3]
                raise RuntimeError(f"the helper's denoiser differs from rank 0's: {len(schema)} vs {len(mine)} "
                                   f"state_dict entries; first differences: {differ}")
            conn.send(("weights ok",))
            _broadcast_weights(half.module)
            _exchange_once(1, device)
            _serve(half, device, conn)
        finally:
            dist.destroy_process_group()
    except (EOFError, BrokenPipeError):
        return  # rank 0 went away
    except BaseException:
        with contextlib.suppress(OSError, ValueError):
            conn.send(("error", traceback.format_exc()))
        raise


def _serve(half: HalfDenoiser, device: torch.device, conn: multiprocessing.connection.Connection) -> None:
    with torch.inference_mode():
        while True:
            message = conn.recv()
            if message[0] == "stop":
                return
            if message[0] != "step":
                raise RuntimeError(f"unknown request {message[0]!r}")
            _, shape, x_dtype, t_dtype = message
            x = torch.empty(shape, dtype=DTYPES[x_dtype], device=device)
            t = torch.empty(1, dtype=DTYPES[t_dtype], device=device)
            dist.recv(x, 0)
            dist.recv(t, 0)
            dist.send(half.predict(x, t[0]).contiguous(), 0)
