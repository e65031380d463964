"""`dit-ar scaffold --clip-weights PATH [--clip-model NAME]`: a text-to-image lane gets clip_score from local open_clip
weights found now (a hub cache folder, a folder, a file; tiny stand-ins, nothing downloaded), with its own
quality.clip and margin; without them the scaffold says the lane cannot keep approximate changes and which flag opens
it; refusals write nothing. Also the scaffold's first step for pipeline weights the sandboxed workers cannot read."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from dit_ar_contract.config import load_config
from dit_ar_contract.errors import Refused
from pytest_dit_ar.cli import scaffold as sc
from pytest_dit_ar.cli import scaffold_clip
from pytest_dit_ar.cli.main import build_parser
from pytest_dit_ar.cli.scaffold_custom import scaffold_custom
from pytest_dit_ar.worker import sandbox
from quality_suite import task_metrics
from tests.helpers.tiny_clip import config_text, hub_cache, save_tiny_clip
from tests.unit.test_scaffold import fake_pipeline

LANE = "pixart-sigma-1024"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git.Repo.init(tmp_path / "repo")
    return tmp_path / "repo"


def scaffold(repo: Path, pipeline: Path, **flags) -> list[str]:
    lines: list[str] = []
    sc.scaffold(sc.Request(pipeline=pipeline, device="cpu", **flags), cwd=repo, out=lines.append)
    return lines


def raw(repo: Path) -> dict:
    return json.loads((repo / "config" / "autoresearch.json").read_text())


def test_a_cache_folder_gives_the_lane_clip_score(repo: Path, tmp_path: Path) -> None:
    checkpoint = hub_cache(tmp_path / "clip-cache")
    pipe = fake_pipeline(tmp_path / "pipe", "PixArtSigmaPipeline")
    lines = scaffold(repo, pipe, clip_weights=tmp_path / "clip-cache")
    node = raw(repo)["lanes"][LANE]
    assert node["task_metrics"] == ["clip_score"]
    assert node["quality"]["clip"] == {"model": None, "weights": str(checkpoint)}  # the file, pinned; its config says
    lane = load_config(repo / "config" / "autoresearch.json").lanes[LANE]
    margins = lane.quality.approximate.task_margin
    assert margins["clip_score"] == scaffold_clip.CLIP_MARGIN and "judge_accuracy" in margins  # merged, not replaced
    assert lane.quality.clip.model is None  # the top-level ViT-B-32 is overridden by the lane's null
    task_metrics.check_available(lane.task_metrics, lane.quality, repo)
    text = "\n".join(lines)
    assert "task metric clip_score: open_clip local-" in text and str(checkpoint) in text
    assert f"lanes.{LANE}.quality.approximate.task_margin.clip_score" in text
    assert "judged on the task metric\n   clip_score against the baseline's" in (repo / "program.md").read_text()
    # a lane with a task metric gets the budget n_pass needs: 13 x its 16 cases = 208 >= 200
    assert node["quality"]["noninferiority"] == {"case_budget_multiple": 13}
    assert lane.quality.noninferiority.case_budget_multiple == 13 and lane.quality.noninferiority.alpha_q == 0.05
    assert f"lane {LANE}: case budget 208 (13 x the 16-case corpus)" in text
    assert "quantization clip_score 200" in text and f"lanes.{LANE}.quality.noninferiority.case_budget_multiple" in text
    assert "n_min takes R, the largest loss of one case, as the score's range (100)" in text  # before a baseline
    assert "case_budget_multiple" in (repo / "program.md").read_text()


def test_weights_inside_the_repository_are_relative_and_fixed(repo: Path, tmp_path: Path) -> None:
    weights = save_tiny_clip(repo / "clip" / "open_clip_model.safetensors")
    (weights.parent / "open_clip_config.json").write_text(config_text())
    scaffold(repo, fake_pipeline(tmp_path / "pipe", "PixArtSigmaPipeline"), clip_weights=repo / "clip",
             clip_model="tiny-model")
    config = raw(repo)
    assert config["lanes"][LANE]["quality"]["clip"] == {"model": "tiny-model",
                                                        "weights": "clip/open_clip_model.safetensors"}
    assert "clip/" in config["fixed_paths"]
    (weights.parent / "open_clip_config.json").write_text("{}")
    with pytest.raises(Refused, match="--clip-weights .* holds no open_clip architecture"):
        scaffold(repo, fake_pipeline(tmp_path / "pipe2", "PixArtSigmaPipeline"), clip_weights=weights, force=True)


def test_a_builtin_architecture_is_written_out(repo: Path, tmp_path: Path) -> None:
    save_tiny_clip(tmp_path / "clip" / "ViT-B-32.pt")  # only its location is read: the scaffold loads nothing
    scaffold(repo, fake_pipeline(tmp_path / "pipe", "PixArtSigmaPipeline"), clip_weights=tmp_path / "clip",
             clip_model="ViT-B-32")
    assert raw(repo)["lanes"][LANE]["quality"]["clip"] == {"model": "ViT-B-32",
                                                         "weights": str(tmp_path / "clip" / "ViT-B-32.pt")}


def test_without_weights_the_scaffold_says_what_the_lane_cannot_keep(repo: Path, tmp_path: Path) -> None:
    lines = scaffold(repo, fake_pipeline(tmp_path / "pipe", "PixArtSigmaPipeline"))
    assert raw(repo)["lanes"][LANE]["task_metrics"] == []
    text = "\n".join(lines)
    assert "no task metric: approximate and quantization changes cannot be kept" in text
    assert "--clip-weights PATH" in text and "`dit-ar guide clip-weights`" in text
    assert "no task metric, so `approximate` and `quantization` changes cannot be kept" in \
        (repo / "program.md").read_text()


@pytest.mark.parametrize("where,message", [
    ("missing", "no such file or folder"),
    ("mutable", "inside the mutable model_under_test/"),
    ("unnamed", "the open_clip architecture of .* is not known: name it in quality.clip.model"),
])
def test_refusals_write_nothing(repo: Path, tmp_path: Path, where: str, message: str) -> None:
    paths = {"missing": tmp_path / "nowhere", "mutable": repo / "model_under_test" / "clip.safetensors",
             "unnamed": tmp_path / "plain" / "clip.safetensors"}
    if where != "missing":
        save_tiny_clip(paths[where])
    with pytest.raises(Refused, match=f"--clip-weights .*{message}"):
        scaffold(repo, fake_pipeline(tmp_path / "pipe", "PixArtSigmaPipeline"), clip_weights=paths[where])
    assert not (repo / "config").exists()


def test_a_class_conditional_pipeline_has_no_prompts_to_score(repo: Path, tmp_path: Path) -> None:
    hub_cache(tmp_path / "cache")
    with pytest.raises(Refused, match="class-conditional .*classifier_top1"):
        scaffold(repo, fake_pipeline(tmp_path / "pipe", "DiTPipeline"), clip_weights=tmp_path / "cache")
    assert not (repo / "config").exists()


def test_the_custom_skeleton_takes_clip_weights_too(repo: Path, tmp_path: Path) -> None:
    hub_cache(tmp_path / "cache")
    lines: list[str] = []
    scaffold_custom(sc.Request(pipeline=Path(), device="cpu", resolution=32, steps=2, cases=4,
                               clip_weights=tmp_path / "cache"), None, cwd=repo, out=lines.append)
    assert raw(repo)["lanes"]["custom-32"]["task_metrics"] == ["clip_score"]
    assert raw(repo)["lanes"]["custom-32"]["quality"]["noninferiority"] == {"case_budget_multiple": 50}  # 4 cases
    assert any(line.startswith("task metric clip_score") for line in lines)


def test_the_flags_parse_and_the_model_needs_the_weights(repo: Path, tmp_path: Path) -> None:
    args = build_parser().parse_args(["scaffold", "--pipeline", "p", "--clip-weights", "c", "--clip-model", "ViT-B-32"])
    assert (args.clip_weights, args.clip_model) == (Path("c"), "ViT-B-32")
    args = build_parser().parse_args(["scaffold", "--pipeline", "p", "--clip-model", "ViT-B-32"])
    with pytest.raises(Refused, match="--clip-model goes with --clip-weights"):
        sc.run(args)


def test_pipeline_weights_nobody_cannot_read_come_first_with_the_command(repo: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """As root the workers run as nobody, and save_pretrained writes safetensors 0600: the scaffold says the fix
    before the commands that would be refused."""
    monkeypatch.setattr(sandbox, "privileged", lambda: True)
    pipe = fake_pipeline(tmp_path / "pipe", "PixArtSigmaPipeline", transformer={"sample_size": 64})
    weights = pipe / "transformer" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(b"\0" * 8)
    weights.chmod(0o600)
    lines = scaffold(repo, pipe)
    first = lines.index("next:") + 1
    assert lines[first].startswith("  first: ") and f"`chmod -R a+rX {pipe.resolve()}`" in lines[first]
    assert "transformer/diffusion_pytorch_model.safetensors (mode 0600)" in lines[first]
    weights.chmod(0o644)
    assert not any("first:" in line for line in scaffold(repo, pipe, force=True))


def test_the_gates_refusal_for_a_lane_without_a_task_metric_names_the_key_and_the_flag() -> None:
    from quality_suite import gates
    from tests.unit.test_gates import QUALITY

    checks = gates.aggregate_checks("approximate", {}, QUALITY, {}, {}, set())
    message = next(c.message for c in checks if c.name == "task_metrics")
    assert "lanes.<lane>.task_metrics" in message and "quality.clip" in message and "--clip-weights PATH" in message
