"""Throwaway virtual environments for the end-to-end tests that install the harness as a user would.

A venv made from the running interpreter (`python -m venv --without-pip`) sees the test environment's packages
(torch, diffusers, ...) through one .pth line naming that environment's site-packages folder: the packages are
found, but that folder's own .pth files (this checkout's editable install) are not processed. The harness itself
is then installed into the venv (`--ignore-installed`: the test environment's own install of it is visible
through that line, and must be neither taken for this one nor removed): the wheel
(`pip install --no-deps --no-index WHEEL`), or an editable install of a checkout
(`pip install --no-deps --no-index --no-build-isolation -e CHECKOUT`). No PYTHONPATH anywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Venv:
    """A virtual environment with the harness installed."""

    root: Path
    python: Path
    site: Path

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return env

    def run(self, cwd: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), cwd=cwd, env=self.env(), capture_output=True, text=True, timeout=timeout)

    def popen(self, cwd: Path, *argv: str) -> subprocess.Popen:
        return subprocess.Popen(list(argv), cwd=cwd, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def dit_ar(self, cwd: Path, *args: str, expect: int | None = 0,
               timeout: float = 600) -> subprocess.CompletedProcess:
        start = time.monotonic()
        proc = self.run(cwd, str(self.root / "bin" / "dit-ar"), *args, timeout=timeout)
        print(f"dit-ar {args[0]}: {time.monotonic() - start:.1f} s")
        if expect is not None:
            assert proc.returncode == expect, f"dit-ar {' '.join(args)} exited {proc.returncode}\n" \
                                              f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        return proc

    def where(self, module: str) -> Path:
        """Where the venv imports `module` from (run outside any project: `python -c` imports from its cwd)."""
        proc = self.run(self.root, str(self.python), "-c", f"import {module}; print({module}.__file__)")
        assert proc.returncode == 0, proc.stderr
        return Path(proc.stdout.strip()).resolve()


def build_wheel(dest: Path) -> Path:
    """The README's build command, unless CI already built the wheel ($DIT_AR_WHEEL)."""
    given = os.environ.get("DIT_AR_WHEEL")
    if given:
        return Path(given)
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dest), str(PROJECT)],
                   check=True, capture_output=True, text=True, timeout=300)
    return next(dest.glob("pytest_dit_ar-*.whl"))


def make_venv(where: Path, *install: str) -> Venv:
    """A venv at `where` seeing the test environment's packages, with `pip install --no-deps INSTALL...` done."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "dit_ar_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "--ignore-installed", "--quiet", *install], check=True, capture_output=True, text=True, timeout=300)
    return Venv(where, python, site)
