"""All demo candidates applied together still build and generate (in a fresh process)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dit_ar.cli.demo import apply, candidates

PROJECT = Path(__file__).resolve().parents[2]


@pytest.mark.extended
def test_all_candidates_together_still_generate(tmp_path: Path) -> None:
    shutil.copytree(PROJECT / "model_under_test", tmp_path / "model_under_test",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    for cand in candidates():
        apply(tmp_path, cand)
    weights = PROJECT / "assets" / "embedded-digits"
    code = ("import sys, torch; sys.path.insert(0, sys.argv[1]); import model_under_test as m; "
            "p = m.build_pipeline({'root': sys.argv[1], 'preset': 'embedded-digits', 'weights': sys.argv[2], "
            "'device': 'cpu', 'resolution': 32, 'steps': 4, 'guidance': 3.0, 'batch': 2, 'options': {}}); "
            "r = p.generate([('a handwritten digit seven', 1), ('3', 2)]); "
            "assert r.images.shape == (2, 3, 32, 32) and torch.isfinite(r.images).all(); print('ok')")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path), str(weights)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]
