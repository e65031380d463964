"""A candidate that floods its stderr (the red team's 3 x 256 MiB into the run folder): every worker's output is
relayed into its log up to the lane's cap (performance.worker_log_mb), the rest is dropped, the cut logs are named in
experiment.json and in the summary, and the experiment is judged as any other (worker/log_relay.py).

CI runs the flood in a candidate whose images are also noisy (declared exact: a quality discard after the quality
run, about a third of the time); the extended tier replays the red team's run whole, every timed worker flooding."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pytest_dit_ar.loop.speed.patching import wrap_generate
from pytest_dit_ar.state import runs
from pytest_dit_ar.worker.log_relay import CUT_LINE, DEFAULT_LOG_MB
from tests.helpers.loop import commit_change, experiment, git, last_line, ledger_rows
from tests.helpers.sandbox_required import require_sandbox

pytestmark = pytest.mark.slow
FLOOD = '''

import sys as _sys

_build_pipeline = build_pipeline


def build_pipeline(spec):
    line = "x" * ((1 << 20) - 1) + "\\n"
    for _ in range(256):  # 256 MiB on stderr in every worker of this tree
        _sys.stderr.write(line)
    _sys.stderr.flush()
    return _build_pipeline(spec)
'''


NOISE = wrap_generate("noise", """\
    out = _gen(requests)
    gen = torch.Generator().manual_seed(0)
    out.images = (out.images + 0.05 * torch.randn(out.images.shape, generator=gen)).clamp(0, 1)
    return out""", "    import torch\n")


def judge_flood(loop_repo: Path, change: str, verdicts: tuple[str, ...]) -> subprocess.CompletedProcess:
    """Commit the flood (and `change`), judge it, and check that every flooded log was cut at the cap and named."""
    require_sandbox()
    commit_change(loop_repo, "model_under_test/__init__.py", FLOOD + change, "flood stderr")
    proc = experiment(loop_repo, "exact", "flood stderr")
    assert last_line(proc) in tuple(f"VERDICT: {v}" for v in verdicts), proc.stdout[-3000:] + proc.stderr[-3000:]
    row = ledger_rows(loop_repo)[-1]
    run_dir = loop_repo / row.run_dir
    cap = int(DEFAULT_LOG_MB * 2**20) + len(CUT_LINE.format(mb=DEFAULT_LOG_MB).encode())
    logs = {p.name: p.stat().st_size for p in run_dir.glob("*.log")}
    assert logs and max(logs.values()) <= cap, logs
    record = runs.read_experiment(run_dir)
    cut = {c.name for c in record.logs.cut}
    flooded = {name for name in logs if name.startswith("worker-candidate-")}
    assert flooded and flooded <= cut, (flooded, cut)  # the candidate's workers, each cut and named
    assert not any(name.startswith("worker-best-") for name in cut)  # the best wrote next to nothing
    assert record.logs.cap_mb == DEFAULT_LOG_MB and all(c.dropped_bytes > 200 << 20 for c in record.logs.cut
                                                         if c.name in flooded)
    assert "worker logs cut at 4 MiB each" in proc.stdout
    return proc


def test_a_flood_of_output_is_cut_at_the_cap_and_named(loop_repo: Path) -> None:
    """Also CI's quality discard: the noisy images fail the exact class's gate, named by metric, case and threshold
    in the summary and the ledger, and the branch is reset (test_quality_loop.py's other discards are extended)."""
    parent = git(loop_repo, "rev-parse", "HEAD")
    proc = judge_flood(loop_repo, NOISE, ("DISCARD-QUALITY",))
    assert proc.returncode == 1 and git(loop_repo, "rev-parse", "HEAD") == parent
    row = ledger_rows(loop_repo)[-1]
    quality = runs.read_quality(loop_repo / row.run_dir)
    assert quality is not None
    first = quality.failures()[0].describe()
    assert first.startswith("psnr_db case ") and "(needs >= " in first
    assert first in proc.stdout and first in row.quality_summary


@pytest.mark.extended
def test_a_flood_in_every_timed_worker_is_cut_and_the_run_judged(loop_repo: Path) -> None:
    judge_flood(loop_repo, "", ("KEEP", "DISCARD-PERFORMANCE"))
