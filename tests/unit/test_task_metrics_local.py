"""Task metrics from local weights files (CLIP with open_clip, ImageNet top-1 with torchvision), configured by path,
with tiny random- or zero-weight stand-ins written to tmp_path: nothing is downloaded. Also what `dit-ar doctor`
says about which task metrics are usable here."""

from __future__ import annotations

import dataclasses
import json
import math
import socket
from pathlib import Path

import pytest
import torch

from dit_ar_contract.config import ClassifierSettings, ClipSettings, load_config
from dit_ar_contract.errors import ConfigError, Refused, UnknownKeyError
from quality_suite import task_metrics
from quality_suite.classifier import preprocess
from quality_suite.corpora import Case
from tests.helpers.loop import PROJECT

RAW = json.loads((PROJECT / "config" / "autoresearch.json").read_text())
QUALITY = load_config(PROJECT / "config" / "autoresearch.json").lanes["embedded-cpu"].quality
WINNER = 7  # the class the zeroed stand-in classifier always predicts
ARCH = "shufflenet_v2_x0_5"  # the smallest torchvision ImageNet classifier with a plain `fc` last layer
SMALL = {"resize": 32, "crop": 32}  # a small input keeps the stand-in fast; geometry is checked separately
TINY_CLIP = {"embed_dim": 32, "vision_cfg": {"image_size": 32, "layers": 1, "width": 64, "patch_size": 16},
             "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}


def write_config(root: Path, raw: dict) -> Path:
    """The config under root/config, with every lane's corpus and the corpus checksums copied next to it."""
    (root / "config").mkdir(parents=True, exist_ok=True)
    corpus_dir = PROJECT / "quality_suite" / "corpus"
    for lane in raw["lanes"].values():
        for corpus in filter(None, (lane["corpus"], lane.get("holdout_corpus"))):
            dest = root / corpus
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes((PROJECT / corpus).read_bytes())
            (dest.parent / "checksums.json").write_bytes((corpus_dir / "checksums.json").read_bytes())
    path = root / "config" / "autoresearch.json"
    path.write_text(json.dumps(raw))
    return path


def raw_config(**quality: dict) -> dict:
    raw = json.loads(json.dumps(RAW))
    raw["quality"].update(quality)
    return raw


def save_classifier(path: Path, arch: str = ARCH, zeroed: bool = True) -> Path:
    """A torchvision classifier's state_dict; zeroed, only the last layer's bias is left, so WINNER always wins."""
    import torchvision

    state = torchvision.models.get_model(arch, weights=None).state_dict()
    if zeroed:
        state = {k: torch.zeros_like(v) for k, v in state.items()}
        state["fc.bias"][WINNER] = 1.0
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    else:
        torch.save(state, path)
    return path


def with_classifier(model: str | None, weights: str | None, **geometry: object):
    return dataclasses.replace(QUALITY, classifier=ClassifierSettings(model, weights, **(geometry or SMALL)))


def labelled_cases(n: int = 4) -> tuple[list[Case], dict[str, torch.Tensor]]:
    """Half the cases ask for WINNER, half for another class; images of odd sizes, as generators make them."""
    cases = [Case(f"c{i}", "a class", i, label=WINNER if i % 2 else 3) for i in range(n)]
    return cases, {c.id: torch.rand(3, 40, 56) for c in cases}


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a connection (a download) fails the test."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a task metric tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# -- classifier_top1 ---------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_classifier_top1_is_the_agreement_of_prediction_and_label(tmp_path: Path, suffix: str) -> None:
    save_classifier(tmp_path / "weights" / f"classifier{suffix}")
    quality = with_classifier(ARCH, f"weights/classifier{suffix}")
    task_metrics.check_available(["classifier_top1"], quality, tmp_path)
    cases, images = labelled_cases()
    score = task_metrics.compute(["classifier_top1"], images, cases, tmp_path, quality)["classifier_top1"]
    assert score.value == 0.5
    assert score.per_case_pass == {c.id: c.label == WINNER for c in cases}
    assert "classifier_top1" not in task_metrics.lower_is_better()


def test_classifier_top1_with_random_weights_and_unlabelled_cases(tmp_path: Path) -> None:
    weights = save_classifier(tmp_path / "random.pth", zeroed=False)
    quality = with_classifier(ARCH, str(weights))  # an absolute path works too
    cases, images = labelled_cases(3)
    cases.append(Case("unlabelled", "no class", 9))
    images["unlabelled"] = torch.rand(3, 40, 56)
    score = task_metrics.compute(["classifier_top1"], images, cases, tmp_path, quality)["classifier_top1"]
    assert 0.0 <= score.value <= 1.0 and math.isfinite(score.value) and set(score.per_case_pass) == {"c0", "c1", "c2"}
    with pytest.raises(Refused, match="classifier_top1 needs corpus cases with a 'label'"):
        task_metrics.compute(["classifier_top1"], images, cases[-1:], tmp_path, quality)
    wrong = [Case("c0", "a class", 0, label=1000)]
    with pytest.raises(Refused, match=r"1000 classes apart .*\['c0'\]"):
        task_metrics.compute(["classifier_top1"], images, wrong, tmp_path, quality)


def test_missing_classifier_weights_are_refused_naming_the_file_and_how(tmp_path: Path) -> None:
    quality = with_classifier("resnet50", "weights/resnet50_imagenet1k_v2.pth")
    with pytest.raises(Refused) as err:
        task_metrics.check_available(["classifier_top1"], quality, tmp_path)
    text = str(err.value)
    assert str(tmp_path / "weights" / "resnet50_imagenet1k_v2.pth") in text and "does not exist" in text
    assert "never downloaded" in text and "get_model_weights('resnet50')" in text and "state_dict()" in text
    assert "quality.classifier" in text and "`dit-ar guide task-metrics`" in text
    with pytest.raises(Refused, match="names no classifier model"):
        task_metrics.check_available(["classifier_top1"], with_classifier(None, None), tmp_path)


def test_a_bad_architecture_or_a_mismatched_file_is_refused(tmp_path: Path) -> None:
    save_classifier(tmp_path / "small.pth")
    with pytest.raises(Refused) as err:
        task_metrics.check_available(["classifier_top1"], with_classifier("resnet-50", "small.pth"), tmp_path)
    assert "'resnet-50'" in str(err.value)
    assert "torchvision.models.list_models(module=torchvision.models)" in str(err.value)
    with pytest.raises(Refused, match="does not fit torchvision's shufflenet_v2_x1_0"):
        task_metrics.check_available(["classifier_top1"], with_classifier("shufflenet_v2_x1_0", "small.pth"), tmp_path)
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(Refused, match="junk.pth cannot be read"):
        task_metrics.check_available(["classifier_top1"], with_classifier(ARCH, "junk.pth"), tmp_path)


@pytest.mark.parametrize("arch,interpolation", [("resnet50", "bilinear"), ("efficientnet_b0", "bicubic")])
def test_preprocessing_matches_torchvisions_own_imagenet_transform(arch: str, interpolation: str) -> None:
    """The weights' transforms() object ships with torchvision (no download); ours must give the same tensor."""
    import torchvision

    reference = torchvision.models.get_model_weights(arch).DEFAULT.transforms()
    images = torch.rand(2, 3, 300, 257)
    ours = preprocess(images, reference.resize_size[0], reference.crop_size[0], interpolation)
    assert torch.allclose(ours, reference(images), atol=1e-5)


# -- the config section ------------------------------------------------------------------------

def test_the_classifier_section_is_parsed_strictly(tmp_path: Path) -> None:
    settings = {"model": "resnet50", "weights": "weights/r50.pth", "resize": 232, "crop": 224}
    config = load_config(write_config(tmp_path, raw_config(classifier=settings)))
    assert config.lanes["dit-xl2-256"].quality.classifier == ClassifierSettings("resnet50", "weights/r50.pth", 232, 224)
    assert load_config(PROJECT / "config" / "autoresearch.json").lanes["dit-xl2-256"].quality.classifier == \
        ClassifierSettings()
    with pytest.raises(UnknownKeyError, match="quality.classifier.arch"):
        load_config(write_config(tmp_path, raw_config(classifier={**settings, "arch": "resnet50"})))
    with pytest.raises(ConfigError, match="quality.classifier.crop"):
        load_config(write_config(tmp_path, raw_config(classifier={**settings, "crop": 300})))
    with pytest.raises(ConfigError, match="quality.classifier.interpolation"):
        load_config(write_config(tmp_path, raw_config(classifier={**settings, "interpolation": "nearest"})))
    with pytest.raises(ConfigError, match="quality.classifier.model"):
        load_config(write_config(tmp_path, raw_config(classifier={**settings, "model": 50})))


# -- clip_score --------------------------------------------------------------------------------

def test_clip_score_from_a_local_file_configured_by_path(tmp_path: Path) -> None:
    """A tiny open_clip architecture (registered from a JSON config, random weights saved under tmp_path), named in a
    config loaded from there, scores offline. (test_quality_metrics.py does the same for the built-in ViT-S-32-alt.)"""
    import open_clip
    from safetensors.torch import save_file

    arch = tmp_path / "clip-configs" / "dit-ar-test-tiny-clip.json"
    arch.parent.mkdir()
    arch.write_text(json.dumps(TINY_CLIP))
    open_clip.add_model_config(arch)
    weights = tmp_path / "weights" / "clip.safetensors"
    weights.parent.mkdir()
    model = open_clip.create_model(arch.stem, pretrained=None)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
    raw = raw_config(clip={"model": arch.stem, "weights": "weights/clip.safetensors"})
    raw["lanes"]["pixart-sigma-1024"]["task_metrics"] = ["clip_score"]
    config = load_config(write_config(tmp_path, raw))
    lane = config.lanes["pixart-sigma-1024"]
    task_metrics.check_available(lane.task_metrics, lane.quality, config.root)
    cases = [Case(f"p{i}", f"a photograph of object {i}", i) for i in range(3)]
    images = {c.id: torch.rand(3, 48, 64) for c in cases}
    score = task_metrics.compute(lane.task_metrics, images, cases, config.root, lane.quality)["clip_score"]
    assert math.isfinite(score.value) and 0.0 <= score.value <= 100.0 and score.per_case_pass is None


def test_clip_models_that_need_the_hugging_face_hub_are_refused(tmp_path: Path) -> None:
    (tmp_path / "siglip.safetensors").write_bytes(b"")
    quality = dataclasses.replace(QUALITY, clip=ClipSettings("ViT-B-16-SigLIP", "siglip.safetensors"))
    with pytest.raises(Refused, match="Hugging Face hub, which the harness never downloads"):
        task_metrics.check_available(["clip_score"], quality, tmp_path)


# -- dit-ar doctor -----------------------------------------------------------------------------

def run_doctor(config_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """doctor() on a machine without GPU (no nvidia-smi, no bwrap probe: the unit tier starts no subprocess)."""
    from dit_ar_contract import device, versions
    from pytest_dit_ar.cli.doctor import doctor
    from pytest_dit_ar.worker import sandbox

    monkeypatch.setattr(versions, "collect", lambda import_torch=True: {"torch": torch.__version__})
    monkeypatch.setattr(device, "list_gpus", lambda: [])
    monkeypatch.setattr(sandbox, "available", lambda: None)
    lines: list[str] = []
    doctor(config_path, out=lines.append)
    return lines


def test_doctor_says_which_task_metrics_are_usable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_classifier(tmp_path / "weights" / "classifier.pth")
    raw = raw_config(classifier={"model": ARCH, "weights": "weights/classifier.pth", **SMALL})
    raw["lanes"]["embedded-cpu"]["weights"] = str(PROJECT / "assets" / "embedded-digits")
    raw["lanes"]["embedded-cpu"]["task_metrics"] += ["classifier_top1"]
    raw["lanes"]["dit-xl2-256"]["task_metrics"] = ["classifier_top1", "clip_score"]
    raw["lanes"]["pixart-sigma-1024"]["task_metrics"] = ["classifier_top1"]  # a text corpus: no labels
    text = "\n".join(run_doctor(write_config(tmp_path, raw), monkeypatch))
    # the default lane's own metrics, one line each; a metric no lane of this machine's session uses in one line
    assert "task metrics of lane embedded-cpu:" in text and "  classifier_top1: usable" in text
    assert "  judge_accuracy: usable" in text and "  frechet_distance: usable" in text
    assert "  other metrics (not for this lane): clip_score (`dit-ar guide task-metrics`)" in text
    assert "  clip_score:" not in text
    assert "open_clip_vit_b32.safetensors does not exist" in text  # the lane that uses it says why
    assert ("lane embedded-cpu: runs here as embedded-cpu on " in text
            and "task metrics judge_accuracy, frechet_distance, classifier_top1 usable" in text)
    assert "  - task metric clip_score is not usable: its weights file" in text
    assert "  - task metric classifier_top1 is not usable: classifier_top1 needs corpus cases with a 'label'" in text
    assert "`dit-ar guide task-metrics`" in text


def test_doctor_names_the_missing_classifier_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = raw_config(classifier={"model": "resnet50", "weights": "weights/resnet50.pth"})
    raw["lanes"]["dit-xl2-256"]["task_metrics"] = ["classifier_top1"]
    text = "\n".join(run_doctor(write_config(tmp_path, raw), monkeypatch))
    missing = tmp_path / "weights" / "resnet50.pth"
    assert "  classifier_top1:" not in text  # the default lane does not use it: its lane says why, below
    assert f"  - task metric classifier_top1 is not usable: its weights file {missing} does not exist" in text
