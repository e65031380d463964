"""`dit-ar doctor` in a user's scaffolded project: install advice that fits where it runs (pip with the version
pytest-dit-ar asks for; this repository's editable install only here), the CLIP weights it finds or where it looked
and what to put where, the lane without a task metric, and pipeline weights the sandboxed workers cannot read."""

from __future__ import annotations

from pathlib import Path

import git
import pytest
import torch

from dit_ar_contract import device, versions
from pytest_dit_ar.cli import scaffold as sc
from pytest_dit_ar.cli.doctor import doctor
from pytest_dit_ar.cli.install_advice import install_command, is_this_repository, requirements
from pytest_dit_ar.worker import sandbox
from tests.helpers.tiny_clip import hub_cache
from tests.unit.test_scaffold import fake_pipeline

PROJECT = Path(__file__).resolve().parents[2]
LANE = "pixart-sigma-1024"
B32 = "laion/CLIP-ViT-B-32-laion2B-s34B-b79K"


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No GPU, a sandbox, no subprocess; the hub cache and the home folder are empty folders under tmp_path."""
    from huggingface_hub import constants

    monkeypatch.setattr(device, "list_gpus", lambda: [])
    monkeypatch.setattr(sandbox, "available", lambda: None)
    monkeypatch.setattr(versions, "collect", lambda import_torch=True: {"torch": torch.__version__})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path / "home"))
    return tmp_path


def project(tmp_path: Path, **flags) -> Path:
    repo = tmp_path / "my-project"
    git.Repo.init(repo)
    pipe = fake_pipeline(tmp_path / "pipe", "PixArtSigmaPipeline")
    sc.scaffold(sc.Request(pipeline=pipe, device="cpu", **flags), cwd=repo, out=lambda line: None)
    return repo / "config" / "autoresearch.json"


def run_doctor(config: Path) -> str:
    lines: list[str] = []
    doctor(config, out=lines.append)
    return "\n".join(lines)


def test_install_advice_fits_where_doctor_runs(tmp_path: Path) -> None:
    assert is_this_repository(PROJECT) and not is_this_repository(tmp_path)
    assert install_command(["open_clip_torch"], PROJECT) == "`pip install -e .` from the repository root"
    wanted = requirements()["open-clip-torch"]  # the installed pytest-dit-ar's own requirement
    assert wanted.startswith("open_clip_torch>=")
    assert install_command(["open_clip_torch", "gitpython"], tmp_path) == \
        f"`pip install '{wanted}' '{requirements()['gitpython']}'`"
    assert install_command(["not-ours"], tmp_path) == "`pip install not-ours`"


def test_doctor_in_a_users_project_says_pip_not_the_editable_install(machine: Path) -> None:
    text = run_doctor(project(machine))
    line = next(line for line in text.splitlines() if line.startswith("MISSING packages"))
    assert "open_clip_torch" in line and f"'{requirements()['open-clip-torch']}'" in line
    assert "-e ." not in line
    here = run_doctor(PROJECT / "config" / "autoresearch.json")
    assert "— install with `pip install -e .` from the repository root" in here


def test_a_lane_without_weights_gets_where_doctor_looked_and_what_to_put_where(machine: Path) -> None:
    config = project(machine)
    text = run_doctor(config)
    assert f"lane {LANE}: runs here" in text
    assert "no task metrics configured, so approximate and quantization changes cannot be kept" in text
    assert f"lanes.{LANE}.task_metrics" in text and "--clip-weights PATH" in text
    root = config.parent.parent
    looked = (f"    no CLIP weights found in {root / 'weights/open_clip_vit_b32.safetensors'}, {root / 'weights'}, "
              f"{machine / 'hf'}, {machine / 'home' / '.cache' / 'clip'}")
    assert looked in text.splitlines()
    target = machine / "home" / "clip-cache"
    assert f"cache_dir='clip-cache')\"; copy clip-cache/ to {target} here" in text
    assert f'set lanes.{LANE}.quality.clip to {{"model": "ViT-B-32", "weights": "{target}"}}' in text
    assert "`dit-ar guide clip-weights`" in text


def test_weights_in_the_hub_cache_are_found_and_named_exactly(machine: Path) -> None:
    found = hub_cache(machine / "hf", B32, with_config=False)
    text = run_doctor(project(machine))
    assert (f"    found {found} (hub repository {B32}): to use it, set lanes.{LANE}.quality.clip to "
            f'{{"model": "ViT-B-32", "weights": "{found}"}} in config/autoresearch.json (a new scaffold: '
            f"--clip-weights {found} --clip-model ViT-B-32)") in text.splitlines()


def test_a_scaffolded_clip_lane_is_usable(machine: Path) -> None:
    checkpoint = hub_cache(machine / "elsewhere")
    text = run_doctor(project(machine, clip_weights=machine / "elsewhere"))
    assert "  clip_score: usable" in text
    assert any(line.startswith("    open_clip local-") and f"from {checkpoint} (hub repository" in line
               for line in text.splitlines())
    assert f"lane {LANE}: runs here as {LANE}" in text and "task metrics clip_score usable" in text


def test_pipeline_weights_nobody_cannot_read_are_a_lane_problem_with_the_command(
        machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = project(machine)
    monkeypatch.setattr(sandbox, "privileged", lambda: True)
    weights = machine / "pipe" / "transformer.safetensors"
    weights.write_bytes(b"\0" * 8)
    weights.chmod(0o600)
    text = run_doctor(config)
    assert f"lane {LANE}: cannot run here" in text
    assert f"transformer.safetensors (mode 0600)); fix: `chmod -R a+rX {(machine / 'pipe').resolve()}`" in text


def test_an_install_without_its_requirements_gets_each_one_named(machine: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`pip install --no-deps` (beside a torch of one's own) leaves the wheel's other requirements to the user:
    doctor names each one missing or in a version it does not accept, with the pip line; extras are not asked for."""
    from pytest_dit_ar.cli import install_advice

    listed = ["torch>=2.4", "rapidfuzz>=3.0", "scipy>=1.10", "ruff>=0.6; extra == 'test'"]
    monkeypatch.setattr(install_advice.metadata, "requires", lambda dist: listed)
    real = install_advice.metadata.version

    def version(name: str) -> str:
        if name in ("rapidfuzz", "ruff"):
            raise install_advice.metadata.PackageNotFoundError(name)
        return "1.2" if name == "scipy" else real(name)

    monkeypatch.setattr(install_advice.metadata, "version", version)
    text = run_doctor(project(machine))
    missing = next(line for line in text.splitlines() if line.startswith("MISSING packages"))
    assert "rapidfuzz" in missing and "'rapidfuzz>=3.0'" in missing and "ruff" not in missing
    assert "torch" not in missing.split(" — ")[0].split(": ")[1].split(", ")  # the torch installed is kept
    assert "packages in a version pytest-dit-ar does not accept: scipy 1.2 (needs scipy>=1.10)" in text


def test_a_text_to_image_lane_sees_its_own_metric_and_its_own_cpu(machine: Path) -> None:
    """Only the metric that fits a lane of prompts is listed (the digit judge's and the classifier's in one line),
    and a CPU lane's scaffolded target is this machine's CPU, not a GPU it does not have."""
    text = run_doctor(project(machine))
    assert f"task metrics: lane {LANE} uses none; what would fit it:" in text and "  clip_score: NOT usable" in text
    assert "  other metrics (not for this lane): judge_accuracy, frechet_distance, classifier_top1" in text
    assert not any(line.startswith(("  judge_accuracy:", "  frechet_distance:", "  classifier_top1:"))
                   for line in text.splitlines())
    assert f"target: {device.cpu_name()}, a CPU (target.device cpu)" in text and "A5500" not in text
