"""The worker server: loads one side's model_under_test through the seam and answers the harness.

This is the only module of the harness that imports `model_under_test`. Run as
`python -m pytest_dit_ar.worker.server --root R ...` (cwd R). The fixed prelude (threads, memory cap,
device identity) runs before any mutable code is imported. Requests and responses are JSON lines on
stdin and on a private copy of stdout; whatever the model prints goes to stderr (the worker log).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, NoReturn

from . import protocol


def _channel() -> Any:
    """Keep the real stdout for the protocol and send fd 1 (model prints) to stderr."""
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto


def _device_identity(torch: Any, device: str) -> dict[str, Any]:
    if device.startswith("cuda"):
        idx = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(idx)
        return {"kind": "cuda", "name": props.name, "uuid": str(getattr(props, "uuid", "")),
                "compute_capability": f"{props.major}.{props.minor}",
                "memory_gb": props.total_memory / 2**30, "torch": torch.__version__,
                "cuda": torch.version.cuda}
    from dit_ar_contract.device import cpu_name

    return {"kind": "cpu", "name": cpu_name(), "threads": torch.get_num_threads(), "torch": torch.__version__}


def import_model(root: Path) -> Any:
    """Import model_under_test from root (the seam) by its file location, without putting root on sys.path:
    every other import keeps resolving to the harness's own folders, never to a copy inside root."""
    package = Path(root).resolve() / "model_under_test"
    loaded = sys.modules.get("model_under_test")
    if loaded is not None:
        if Path(loaded.__file__).resolve().parent != package:
            raise ImportError(f"model_under_test is already imported from {loaded.__file__}, not from {package}")
        return loaded
    spec = importlib.util.spec_from_file_location("model_under_test", package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    if spec is None or spec.loader is None:
        raise ImportError(f"no model_under_test package at {package}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["model_under_test"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["model_under_test"]
        raise
    return module


# Fixed code every worker needs, imported before the hello, so that a worker started ahead of time has
# paid for its imports before any candidate code runs (module, attribute to resolve in it or ""). The compiler
# (dynamo, inductor) is imported in every worker too: its modules are host memory a side holds whether or not it
# compiles, so the memory guardrail compares what the sides run, not what they imported (44 MB on the CPU lane).
PRELOAD = (("diffusers", "ModelMixin"), ("diffusers", "SchedulerMixin"), ("quality_suite.audit", ""),
           ("torch._dynamo", ""), ("torch._inductor.compile_fx", ""))


def preload() -> None:
    for module, attr in PRELOAD:
        loaded = importlib.import_module(module)
        if attr:
            getattr(loaded, attr)  # diffusers loads its submodules lazily, on attribute access


class Worker:
    """State of one worker: the built pipeline and the hooks the harness installed on it."""

    def __init__(self, root: Path, device: str, threads: int, cap_gb: float | None):
        import torch

        preload()

        self.torch = torch
        self.settle = DeviceSync(torch)  # bound before the candidate is imported (build)
        self.root, self.device = root, device
        torch.set_num_threads(threads)
        if device.startswith("cuda") and cap_gb:
            total = torch.cuda.get_device_properties(torch.device(device).index or 0).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, cap_gb * 2**30 / total), device)
        self.identity = _device_identity(torch, device)
        self.pipe: Any = None
        self.spec: dict[str, Any] = {}
        self.counter: Any = None  # worker/rows.py's DenoiserRows, set at build
        self.rows_observable = True

    # -- ops --------------------------------------------------------------------------------
    def build(self, spec: dict[str, Any]) -> dict[str, Any]:
        from quality_suite import audit

        module = import_model(self.root)
        start = time.perf_counter()
        self.pipe, self.spec = module.build_pipeline(spec), dict(spec)
        build_s = time.perf_counter() - start
        components = getattr(self.pipe, "components", None)
        if not isinstance(components, dict) or "transformer" not in components:
            raise TypeError("the pipeline must expose .components, a dict with a 'transformer' entry "
                            "(docs/design/README.md)")
        from .rows import DenoiserRows

        self.counter = DenoiserRows(components["transformer"])  # its call and, whatever the path, its entry modules
        # with several GPUs the pipeline may run denoiser passes in processes it started (CFG-parallel's second
        # rank): this process cannot see them, so no row count is claimed and the audit leaves that test out
        self.rows_observable = int(spec.get("gpus", 1)) == 1
        return {"build_s": build_s, "audit": audit.inspect_pipeline(self.pipe)}

    @property
    def rows(self) -> int:
        """The denoiser's rows since the last reset (0 before a build)."""
        return self.counter.rows if self.counter is not None else 0

    @rows.setter
    def rows(self, value: int) -> None:
        if value != 0:
            raise ValueError("the row count is only reset (to 0)")
        if self.counter is not None:
            self.counter.reset()

    def generate(self, requests: list[list[Any]], out: str, perturb: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run the pipeline and write images and latents to `out` for the harness to read and check.

        Every generate, quality case or timed round, comes through here with the same fields, so the
        model cannot tell them apart; what the reply says about the outputs is never trusted."""
        from safetensors.torch import save_file

        torch = self.torch
        reqs = self._built_requests(requests)
        self.rows = 0
        with self._perturbed(perturb or {}):
            result = self.pipe.generate(reqs)
            images = result.images.detach().to("cpu", torch.float32).contiguous()
            latents = result.latents.detach().to("cpu", torch.float32).contiguous()
        save_file({"images": images, "latents": latents}, out)
        rows = self.rows / len(reqs) if self.rows_observable else None
        return {"denoiser_rows_per_image": rows, "memory": self.memory()}

    def activation_dtypes(self, requests: list[list[Any]]) -> dict[str, Any]:
        """The dtypes of every module output during one generate (the audit's activation evidence)."""
        torch = self.torch
        reqs = self._built_requests(requests)
        dtypes: set[str] = set()

        def hook(module: Any, args: Any, output: Any) -> None:
            for t in output if isinstance(output, (tuple, list)) else [output]:
                if isinstance(t, torch.Tensor):
                    dtypes.add(str(t.dtype).replace("torch.", ""))

        handle = torch.nn.modules.module.register_module_forward_hook(hook)
        try:
            with torch.inference_mode():
                self.pipe.generate(reqs)
        finally:
            handle.remove()
        return {"activation_dtypes": sorted(dtypes)}

    def profile(self, requests: list[list[Any]], trace: str | None = None, repeats: int = 3) -> dict[str, Any]:
        """Stage times, top ops, FLOPs and memory of one generate (perf_suite.profiling)."""
        from perf_suite import profiling

        return profiling.profile_generate(self, self._built_requests(requests), trace, repeats)

    def flops(self, requests: list[list[Any]]) -> dict[str, Any]:
        """FLOPs of one generate of `requests` (torch.utils.flop_counter)."""
        from perf_suite import profiling

        return profiling.count_flops(self, self._built_requests(requests))

    def replica(self) -> Any:
        """A second build of the same candidate from the same spec, without the harness's hooks (the profile counts
        a graphed pipeline's FLOPs on it: perf_suite.profiling.replica_flops)."""
        if self.pipe is None:
            raise RuntimeError("build was not called")
        return import_model(self.root).build_pipeline(dict(self.spec))

    def peak(self) -> dict[str, Any]:
        """A measured arithmetic and copy peak of this worker's device (for devices not in the roofline table)."""
        from perf_suite import profiling

        return profiling.measure_peak(self)

    # -- helpers ----------------------------------------------------------------------------
    def _built_requests(self, requests: list[list[Any]]) -> list[tuple[str, int]]:
        if self.pipe is None:
            raise RuntimeError("build was not called")
        return [(str(p), int(s)) for p, s in requests]

    @contextlib.contextmanager
    def _perturbed(self, perturb: dict[str, Any]):
        """Benign, mathematically-equivalent perturbations used to calibrate the exact envelope."""
        torch = self.torch
        threads = torch.get_num_threads()
        with contextlib.ExitStack() as stack:
            if "threads" in perturb:
                torch.set_num_threads(int(perturb["threads"]))
                stack.callback(torch.set_num_threads, threads)
            if "sdpa" in perturb:
                from torch.nn.attention import SDPBackend, sdpa_kernel

                backend = {"math": SDPBackend.MATH, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                           "flash": SDPBackend.FLASH_ATTENTION}[perturb["sdpa"]]
                stack.enter_context(sdpa_kernel([backend, SDPBackend.MATH]))
            stack.enter_context(torch.inference_mode())
            yield

    def memory(self) -> dict[str, float]:
        torch = self.torch
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        mem = {"peak_rss_mb": rss_mb}
        if self.device.startswith("cuda"):
            mem["peak_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
            mem["peak_reserved_mb"] = torch.cuda.max_memory_reserved() / 2**20
        return mem


class DeviceSync:
    """The device-wide synchronize a worker replies after: it waits for every kernel this process queued on
    any stream of any visible GPU, so that nothing the side left running overlaps the other side's timed
    round. Bound when the worker starts, before any candidate code is imported: a candidate that later
    replaces `torch.cuda.synchronize`, the native function behind it or `torch.cuda.is_initialized` changes
    nothing here (once CUDA was seen initialised the sync runs after every request). A no-op while CUDA was
    never initialised (CPU lanes, a worker that has not touched the GPU)."""

    def __init__(self, torch: Any):
        cuda = getattr(torch, "cuda", None)
        native = getattr(getattr(torch, "_C", None), "_cuda_synchronize", None)
        self._cuda = cuda
        self._sync = native or getattr(cuda, "synchronize", None)
        self._initialised = getattr(cuda, "is_initialized", None)
        self._count = getattr(cuda, "device_count", None)
        self._device = getattr(cuda, "device", None)
        self._seen = False

    def __call__(self) -> None:
        if self._sync is None or self._initialised is None or self._count is None or self._device is None:
            return
        self._seen = self._seen or bool(self._initialised())
        if not self._seen:
            return
        for index in range(self._count()):
            with self._device(index):
                self._sync()


def serve(worker: Worker, proto: Any, stdin: Any) -> None:
    ops: dict[str, Callable[..., dict[str, Any]]] = {"build": worker.build, "generate": worker.generate,
                                                     "activation_dtypes": worker.activation_dtypes,
                                                     "profile": worker.profile, "flops": worker.flops,
                                                     "peak": worker.peak}
    for line in stdin:
        if not line.strip():
            continue
        msg = protocol.decode(line)
        op = msg.pop("op", None)
        if op == "exit":
            break
        try:
            if op not in ops:
                raise ValueError(f"unknown op {op!r}")
            reply = {"ok": True, **ops[op](**msg)}
        except BaseException as exc:  # reported to the harness, which decides what it means
            if isinstance(exc, KeyboardInterrupt):
                raise
            reply = {"ok": False, "kind": protocol.error_kind(exc), "error": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc()[-6000:]}
            traceback.print_exc(file=sys.stderr)
        with contextlib.suppress(Exception):  # a broken context is the next request's error
            worker.settle()  # before the reply: the round trip includes whatever the side queued
        proto.write(protocol.encode(reply).decode())
        proto.flush()


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(prog=protocol.SERVER_MODULE)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cap-gb", type=float, default=None)
    args = parser.parse_args(argv)
    return run(args.root, args.device, args.threads, args.cap_gb, started)


def run(root: Path, device: str, threads: int, cap_gb: float | None, started: float) -> int:
    """Build the worker, say hello on the protocol channel and serve until exit (an exec'd worker's main,
    and a forked child of the fork server after it took over its own stdin, stdout and log)."""
    proto = _channel()
    try:
        worker = Worker(root, device, threads, cap_gb)
    except BaseException as exc:
        proto.write(protocol.encode({"ok": False, "kind": "exception", "error": f"{type(exc).__name__}: {exc}",
                                     "traceback": traceback.format_exc()[-6000:]}).decode())
        return 1
    proto.write(protocol.encode({"ok": True, "protocol": protocol.VERSION, "pid": os.getpid(),
                                 "identity": worker.identity, "prelude_s": time.perf_counter() - started}).decode())
    proto.flush()
    serve(worker, proto, sys.stdin)
    leave()


def leave() -> NoReturn:
    """Exit after the harness's exit request: the candidate's atexit handlers run (a helper rank it started
    is closed there), the interpreter's own teardown does not (with torch loaded it took several seconds
    under load, between segments: the harness waited for it)."""
    import atexit

    atexit._run_exitfuncs()  # noqa: SLF001 - what sys.exit would run, without the module teardown
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
