"""The demo's built-in candidates apply to the current model whatever the earlier verdicts were."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dit_ar.demo import CANDIDATES, apply
from pytest_dit_ar.errors import Refused

PROJECT = Path(__file__).resolve().parents[1]


def _copy(tmp: Path) -> Path:
    shutil.copytree(PROJECT / "model_under_test", tmp / "model_under_test",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tmp


@pytest.mark.parametrize("kept", list(itertools.product([False, True], repeat=len(CANDIDATES) - 1)),
                         ids=lambda k: "".join("K" if x else "D" for x in k))
def test_every_candidate_applies_after_any_earlier_verdicts(tmp_path: Path, kept: tuple[bool, ...]) -> None:
    repo = _copy(tmp_path)
    for cand, keep in zip(CANDIDATES, kept + (True,)):
        before = {p: (repo / p).read_text() for p in {c.path for c in CANDIDATES}}
        apply(repo, cand)
        assert (repo / cand.path).read_text() != before[cand.path]
        if not keep:  # a discard: the harness resets the commit
            for path, text in before.items():
                (repo / path).write_text(text)


def test_a_candidate_that_no_longer_applies_is_refused(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    (repo / CANDIDATES[0].path).write_text("# rewritten\n")
    with pytest.raises(Refused, match="no longer applies"):
        apply(repo, CANDIDATES[0])


def test_all_candidates_together_still_generate(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    for cand in CANDIDATES:
        apply(repo, cand)
    code = ("import sys, torch; sys.path.insert(0, sys.argv[1]); import model_under_test as m; "
            "p = m.build_pipeline({'root': sys.argv[1], 'preset': 'embedded-digits', 'device': 'cpu', "
            "'resolution': 32, 'steps': 4, 'guidance': 3.0, 'batch': 2, 'options': {}}); "
            "r = p.generate([('a handwritten digit seven', 1), ('3', 2)]); "
            "assert r.images.shape == (2, 3, 32, 32) and torch.isfinite(r.images).all(); print('ok')")
    proc = subprocess.run([sys.executable, "-c", code, str(repo)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]
