"""Helpers for the end-to-end tests: a copy of the project in a temporary git repo, driven by the CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pytest_dit_ar.loop.speed.patching import DELAY_LINE, sleep_patch
from pytest_dit_ar.state import ledger
from pytest_dit_ar.state.ledger import LedgerRow
from pytest_dit_ar.state.paths import StatePaths

__all__ = ["DELAY_LINE"]  # the model patches themselves: pytest_dit_ar.loop.speed.patching

PROJECT = Path(__file__).resolve().parents[2]
COPY = ("dit_ar_contract", "pytest_dit_ar", "quality_suite", "perf_suite", "model_under_test", "assets", "config",
        "pyproject.toml", ".gitignore", "conftest.py", "program.md", "handbook")

# more pairs only when a look is inconclusive (up to 12: a real speedup on a loaded 2-core machine, where pairs differ
# by 10-30%, needs the degrees of freedom; decisive looks stop at 2-4 pairs); no pacing of the quality run
# (tests/unit/test_quality_gaps.py covers it; it would add about 8 s to every experiment here)
FAST_PERF = {"rounds": 6, "warmup_rounds": 1, "max_segments": 12, "quality_gaps": False}

# the embedded pipeline's classifier-free guidance in one forward of both halves instead of two: an exact reordering
# (outputs within float noise, about 3e-6, of the two passes') and a real speedup on the CPU lane
TWO_CFG_PASSES = ("                    eps_cond = self.predict_noise(model_input, t, labels)\n"
                  "                    eps_uncond = self.predict_noise(model_input, t, null)\n")
ONE_CFG_PASS = ("                    both = self.predict_noise(torch.cat([model_input, model_input]), t,\n"
                "                                              torch.cat([labels, null]))\n"
                "                    eps_cond, eps_uncond = both.chunk(2)\n")


def env_for(repo: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo)
    env.pop("PYTEST_ADDOPTS", None)
    return env


def run(repo: Path, *args: str, check: bool = False, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `dit-ar ARGS` in repo; returns the completed process (stdout and stderr as text)."""
    proc = subprocess.run([sys.executable, "-m", "pytest_dit_ar.cli", *args], cwd=repo, env=env_for(repo),
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"dit-ar {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def make_project_copy(dest: Path, slow_s: float = 0.15, perf: dict | None = None) -> Path:
    """Copy the project's fixed and mutable files into a fresh git repo with a fast test config."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in COPY:
        src = PROJECT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    init = dest / "model_under_test" / "__init__.py"
    # the model sleeps before each generate(): an avoidable, exactly equivalent cost a candidate may remove
    init.write_text(init.read_text() + sleep_patch(slow_s))
    cfg_path = dest / "config" / "autoresearch.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["lanes"]["embedded-cpu"]["performance"] = {**FAST_PERF, **(perf or {})}
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    git(dest, "init", "-q", "-b", "main")
    git(dest, "config", "user.email", "tests@example.invalid")
    git(dest, "config", "user.name", "dit-ar tests")
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "project copy")
    return dest


def clone_state(template: Path, dest: Path) -> Path:
    """A copy of a prepared repo (git, session and baseline included)."""
    shutil.copytree(template, dest, symlinks=True)
    return dest


def commit_change(repo: Path, path: str, text: str, message: str, append: bool = True) -> str:
    target = repo / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text((target.read_text() if append and target.exists() else "") + text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def set_slow(repo: Path, slow_s: float, message: str) -> str:
    init = repo / "model_under_test" / "__init__.py"
    text = init.read_text()
    lines = [f"{DELAY_LINE}{slow_s}" if line.startswith(DELAY_LINE) else line for line in text.splitlines()]
    init.write_text("\n".join(lines) + "\n")
    git(repo, "commit", "-qam", message)
    return git(repo, "rev-parse", "HEAD")


def batch_cfg(repo: Path) -> None:
    """Rewrite the embedded pipeline's two guidance passes into one batched forward (not committed)."""
    pipeline = repo / "model_under_test" / "pipeline.py"
    text = pipeline.read_text()
    assert TWO_CFG_PASSES in text, "the pipeline's guidance passes moved: update tests/helpers/loop.py"
    pipeline.write_text(text.replace(TWO_CFG_PASSES, ONE_CFG_PASS))


def ledger_rows(repo: Path) -> list[LedgerRow]:
    """The repo's ledger, read by the harness's own reader."""
    return ledger.read(StatePaths(repo).ledger)


def experiment(repo: Path, cls: str = "exact", desc: str = "test candidate",
               *extra: str) -> subprocess.CompletedProcess:
    return run(repo, "experiment", "--classification", cls, "--description", desc, *extra)


def last_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stdout.rstrip("\n").splitlines()
    return lines[-1] if lines else ""
