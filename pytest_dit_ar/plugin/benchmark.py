"""pytest-benchmark support: a device-synchronising timer and GPU machine info (docs/design/speed-verdict.md)."""

from __future__ import annotations

import sys
import time
from typing import Any

TIMER = "pytest_dit_ar.plugin.benchmark.synchronized_perf_counter"
DEFAULT_TIMER = "time.perf_counter"  # pytest-benchmark's default (timeit.default_timer)


def synchronized_perf_counter() -> float:
    """time.perf_counter() after torch.cuda.synchronize() when CUDA is initialised in this process.

    The harness's own benchmarks time worker round trips (the worker's reply already waited for the
    device), so here no CUDA context exists and this is plain perf_counter; a user benchmark that
    runs CUDA work in the pytest process gets device-complete timings without its own syncs.
    """
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter()


def default_benchmark_timer(config: Any) -> None:
    """Make the synchronising timer pytest-benchmark's default unless the user chose one."""
    if getattr(config.option, "benchmark_timer", None) != DEFAULT_TIMER:
        return
    if any(str(arg).startswith("--benchmark-timer") for arg in config.invocation_params.args):
        return
    config.option.benchmark_timer = TIMER


def _lane(config_path: Any, lane_option: str | None) -> str | None:
    """The lane the session runs: the option, else session.json's, else the config's default."""
    if lane_option:
        return lane_option
    from dit_ar_contract.config import load_config
    from dit_ar_contract.errors import Refused

    from ..state.session import session_lane_name

    try:
        return session_lane_name(load_config(config_path))
    except Refused:  # no or broken config: the plugin still reports the rest
        return None


def machine_info(config_path: Any, lane_option: str | None) -> dict[str, Any]:
    """GPU name, driver, CUDA and torch versions and the lane, without creating a CUDA context."""
    from dit_ar_contract.device import list_gpus

    info: dict[str, Any] = {"dit_ar_lane": _lane(config_path, lane_option)}
    try:
        import torch

        info.update(torch=torch.__version__, cuda=torch.version.cuda)
    except ImportError:
        info.update(torch=None, cuda=None)
    gpus = list_gpus()
    info["gpus"] = [{"name": g.name, "compute_capability": g.compute_capability, "memory_gb": round(g.memory_gb, 1)}
                    for g in gpus]
    info["gpu_driver"] = gpus[0].driver if gpus else None
    return info
