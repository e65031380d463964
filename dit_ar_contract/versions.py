"""Versions of the software stack, for doctor and for the environment recorded with a baseline."""

from __future__ import annotations

import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = ("torch", "diffusers", "transformers", "open_clip_torch", "torchmetrics", "pytest",
            "pytest-benchmark", "gitpython", "filelock", "safetensors")


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def torch_cuda_from_files() -> str | None:
    """The CUDA version torch was built for, read from its installed torch/version.py without importing torch
    (seconds on a loaded machine); None without torch or for a CPU build."""
    try:
        path = Path(str(metadata.distribution("torch").locate_file("torch/version.py")))
        text = path.read_text(encoding="utf-8")
    except (metadata.PackageNotFoundError, OSError):
        return None
    found = re.search(r"^cuda\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return found.group(1) if found else None


def collect(import_torch: bool = True) -> dict[str, str | None]:
    """The stack; `import_torch=False` (doctor) reads torch's CUDA version from its files and leaves cudnn out."""
    info: dict[str, str | None] = {"python": platform.python_version(), "platform": platform.platform()}
    info.update({name: package_version(name) for name in PACKAGES})
    if not import_torch:
        info["torch_cuda"] = torch_cuda_from_files()
        info["nvidia_driver"] = driver_version()
        return info
    try:
        import torch

        info["torch_cuda"] = torch.version.cuda
        info["cudnn"] = str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None
    except ImportError:
        pass
    info["nvidia_driver"] = driver_version()
    return info


# What a speed figure or an output depends on: a change in any of these between a baseline and an experiment
# makes the two incomparable (a faster torch is not the candidate's win; new kernels change the bits).
STACK = ("python", "torch", "torch_cuda", "cudnn", "diffusers", "transformers", "nvidia_driver")


def stack(info: dict[str, str | None]) -> dict[str, str | None]:
    """The software stack part of `collect()`'s answer."""
    return {k: info.get(k) for k in STACK}


def stack_differences(recorded: dict[str, object], current: dict[str, str | None]) -> list[str]:
    """'name recorded -> current' for each part of the stack that changed (parts the record lacks are skipped:
    a baseline from before a part was recorded cannot say)."""
    return [f"{k} {recorded[k]} -> {current.get(k)}" for k in STACK
            if k in recorded and str(recorded[k] or "") != str(current.get(k) or "")]
