"""A text-to-image lane a user brings, judged on CLIP scores, end to end through the CLI: a tiny PixArt-Sigma saved
with save_pretrained into a fresh git repository, a tiny open_clip model in a Hugging Face hub cache folder outside
it (tests/helpers/tiny_clip.py; nothing is downloaded), then `dit-ar scaffold --clip-weights`, `doctor`, `init`,
`baseline` and an approximate change (half the sampling steps) whose verdict names clip_score with its value.

Where dit-ar runs as root the workers run as nobody and the pipeline's safetensors files are 0600: the scaffold
must say the fix first, the first `baseline` must refuse with the same command, and it runs once that is done."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from pytest_dit_ar.cli.scaffold_clip import CLIP_MARGIN
from pytest_dit_ar.loop.speed.patching import wrap_build
from pytest_dit_ar.state import runs
from pytest_dit_ar.worker import sandbox
from tests.helpers.loop import FAST_PERF, experiment, git, last_line, ledger_rows, run
from tests.helpers.sandbox_required import require_sandbox
from tests.helpers.tiny_clip import REPO, hub_cache
from tests.helpers.tiny_pipelines import save_tiny

LANE = "t2i"
HALF_STEPS = wrap_build("half", "return _build_half(dict(spec, steps=max(1, spec['steps'] // 2)))")


def new_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "tests@example.invalid")
    git(path, "config", "user.name", "dit-ar tests")
    return path


def commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)


@pytest.mark.extended
@pytest.mark.slow
def test_an_approximate_change_on_a_users_text_to_image_lane_is_judged_on_clip_score(tmp_path: Path) -> None:
    require_sandbox()
    repo = new_repo(tmp_path / "my-t2i")
    pipeline = save_tiny("PixArtSigmaPipeline", repo / "weights" / "tiny")
    checkpoint = hub_cache(tmp_path / "clip-cache")
    commit(repo, "a tiny PixArt-Sigma")

    scaffolded = run(repo, "scaffold", "--pipeline", "weights/tiny", "--device", "cpu", "--resolution", "32",
                     "--steps", "4", "--cases", "4", "--lane", LANE, "--clip-weights", str(tmp_path / "clip-cache"),
                     check=True).stdout
    assert "task metric clip_score: open_clip local-" in scaffolded and str(checkpoint) in scaffolded
    fix = f"`chmod -R a+rX {pipeline.resolve()}`"
    as_nobody = sandbox.privileged()
    assert (fix in scaffolded) is as_nobody, scaffolded  # safetensors wrote the pipeline's files 0600
    config_path = repo / "config" / "autoresearch.json"
    config = json.loads(config_path.read_text())
    assert config["lanes"][LANE]["task_metrics"] == ["clip_score"]
    config["lanes"][LANE]["performance"] = {**FAST_PERF, "max_segments": 2}
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    commit(repo, "Set up dit-ar")

    doctor = run(repo, "doctor")
    assert "  clip_score: usable" in doctor.stdout and f"(hub repository {REPO})" in doctor.stdout
    assert (doctor.returncode, fix in doctor.stdout) == ((1, True) if as_nobody else (0, False)), doctor.stdout
    run(repo, "init", "--tag", "clip", "--lane", LANE, check=True)
    if as_nobody:
        refused = run(repo, "baseline", "--quiet")
        assert refused.returncode == 2 and fix in refused.stdout + refused.stderr, refused.stdout + refused.stderr
        subprocess.run(["chmod", "-R", "a+rX", str(pipeline.resolve())], check=True)
        assert git(repo, "status", "--porcelain") == ""  # git keeps no read bits: nothing to commit
    doctor = run(repo, "doctor", check=True).stdout
    assert f"lane {LANE}: runs here" in doctor and "task metrics clip_score usable" in doctor
    run(repo, "baseline", "--quiet", check=True)

    with (repo / "model_under_test" / "__init__.py").open("a") as f:
        f.write(HALF_STEPS)
    commit(repo, "half the sampling steps")
    proc = experiment(repo, "approximate", "half the sampling steps")
    assert last_line(proc).startswith("VERDICT:"), proc.stdout[-3000:] + proc.stderr[-3000:]
    row = ledger_rows(repo)[-1]
    quality = runs.read_quality(repo / row.run_dir)
    assert quality is not None and quality.effective_class == "approximate"
    base, cand = quality.task_baseline["clip_score"], quality.task_candidate["clip_score"]
    assert 0.0 <= cand <= 100.0 and 0.0 <= base <= 100.0
    assert re.search(rf"clip_score={cand:.4g}(;|$)", row.quality_summary), row.quality_summary  # the verdict row
    gate = next(c for c in quality.aggregate if c.name == "clip_score")
    # the paired non-inferiority test over per-image CLIP scores: its value is the one-sided upper bound of the
    # degradation, judged against the declared margin
    assert gate.op == "<=" and gate.threshold == pytest.approx(CLIP_MARGIN) and "cases" in gate.message
    assert gate.passed is (gate.value <= gate.threshold), gate.message
    assert gate.value >= base - cand - 1e-9  # an upper bound is never below the measured degradation
    if not gate.passed:
        assert row.status.word == "DISCARD-QUALITY"
