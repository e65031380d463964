"""Local CLIP weights found offline (quality_suite/clip_weights.py, clip.spec_for): a checkpoint file, a folder holding
one, a Hugging Face hub cache folder (laid out by tests/helpers/tiny_clip.py as huggingface_hub writes it, and read
back here with huggingface_hub's own offline lookup as well); the architecture from the folder's open_clip_config.json
or from open_clip's table of hub repositories; the refusals, each with what to pass instead."""

from __future__ import annotations

import json
import math
import os
import socket
from pathlib import Path

import pytest
import torch

from dit_ar_contract.config import ClipSettings
from dit_ar_contract.errors import Refused
from quality_suite import clip, clip_weights
from quality_suite.corpora import Case
from tests.helpers.tiny_clip import REPO, TINY_CLIP, hub_cache, save_tiny_clip

B32 = "laion/CLIP-ViT-B-32-laion2B-s34B-b79K"  # open_clip's hub repository of ViT-B-32 laion2b_s34b_b79k
OPENAI_B32 = "timm/vit_base_patch32_clip_224.openai"  # ViT-B-32 openai: trained with QuickGELU


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("finding CLIP weights tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def named(cache: Path, repo: str) -> Path:
    """A hub cache entry for `repo` holding the tiny weights under open_clip's name, without config (only its
    location is read in these tests, never its content)."""
    return hub_cache(cache, repo, with_config=False)


# -- locating --------------------------------------------------------------------------------------------

def test_a_file_is_itself_and_its_folder_config_comes_along(tmp_path: Path) -> None:
    weights = save_tiny_clip(tmp_path / "clip" / "tiny.safetensors")
    assert clip_weights.locate(weights) == clip_weights.Checkpoint(weights)
    (tmp_path / "clip" / "open_clip_config.json").write_text("{}")
    assert clip_weights.locate(weights).config == tmp_path / "clip" / "open_clip_config.json"
    (tmp_path / "clip" / "notes.txt").write_text("")
    with pytest.raises(Refused, match="notes.txt is not a checkpoint file"):
        clip_weights.locate(tmp_path / "clip" / "notes.txt")


def test_a_plain_folder_gives_open_clips_name_or_its_only_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "clip"
    only = save_tiny_clip(folder / "mine.safetensors")
    assert clip_weights.locate(folder).path == only
    other = save_tiny_clip(folder / "other.pt")
    with pytest.raises(Refused, match=r"several checkpoints \(mine.safetensors, other.pt\).*--clip-weights FILE"):
        clip_weights.locate(folder)
    preferred = save_tiny_clip(folder / "open_clip_model.safetensors")
    assert clip_weights.locate(folder).path == preferred
    assert other.exists()


def test_open_clips_download_folder_is_read_by_the_models_file_name(tmp_path: Path) -> None:
    """open_clip without huggingface_hub downloads from a URL into ~/.cache/clip, under the URL's file name."""
    folder = tmp_path / "clip"
    save_tiny_clip(folder / "RN50.pt")
    b32 = save_tiny_clip(folder / "ViT-B-32.pt")
    assert "ViT-B-32.pt" in clip_weights.url_names("ViT-B-32")
    assert clip_weights.locate(folder, "ViT-B-32").path == b32
    with pytest.raises(Refused, match="several checkpoints"):
        clip_weights.locate(folder)


def test_an_empty_or_missing_folder_is_refused_with_what_is_there(tmp_path: Path) -> None:
    (tmp_path / "clip").mkdir()
    (tmp_path / "clip" / "README.md").write_text("")
    with pytest.raises(Refused, match=r"holds no checkpoint file .*it holds README.md"):
        clip_weights.locate(tmp_path / "clip")
    with pytest.raises(Refused, match="does not exist"):
        clip_weights.locate(tmp_path / "nowhere")


def test_a_hub_cache_folder_gives_the_revision_main_points_at(tmp_path: Path) -> None:
    """The cache open_clip writes with cache_dir=: the snapshot main points at, as huggingface_hub's own offline
    lookup finds it."""
    from huggingface_hub import try_to_load_from_cache

    checkpoint = hub_cache(tmp_path / "cache")
    found = clip_weights.locate(tmp_path / "cache")
    assert found == clip_weights.Checkpoint(checkpoint, checkpoint.with_name("open_clip_config.json"), REPO)
    assert Path(try_to_load_from_cache(REPO, checkpoint.name, cache_dir=tmp_path / "cache")) == found.path
    assert clip_weights.locate(tmp_path / "cache" / "models--dit-ar-tests--tiny-clip") == found  # one repo's folder
    assert clip_weights.locate(found.path).repo == REPO  # the file itself still knows its repository


def test_an_older_snapshot_is_not_taken(tmp_path: Path) -> None:
    checkpoint = hub_cache(tmp_path / "cache")
    old = checkpoint.parent.with_name("f" * 40)
    old.mkdir()
    (old / checkpoint.name).symlink_to(os.readlink(checkpoint))
    assert clip_weights.locate(tmp_path / "cache").path == checkpoint


def test_a_cache_with_other_models_only_counts_open_clip_files(tmp_path: Path) -> None:
    """A text encoder cached beside CLIP has a model.safetensors too: it is never taken for CLIP."""
    cache = tmp_path / "cache"
    checkpoint = hub_cache(cache)
    hub_cache(cache, "google/t5-small", with_config=False, name="model.safetensors")
    assert clip_weights.locate(cache).path == checkpoint
    with pytest.raises(Refused, match="holds no open_clip checkpoint"):
        clip_weights.locate(cache / "models--google--t5-small")


def test_several_cached_models_are_chosen_by_the_architecture_or_refused(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    tiny = hub_cache(cache)
    b32 = named(cache, B32)
    with pytest.raises(Refused, match=r"several open_clip checkpoints; name one in quality.clip.weights") as err:
        clip_weights.locate(cache)
    assert str(tiny) in str(err.value) and str(b32) in str(err.value)
    assert clip_weights.locate(cache, "ViT-B-32").path == b32
    with pytest.raises(Refused, match=r"none of ViT-L-14's .*--clip-model"):
        clip_weights.locate(cache, "ViT-L-14")


# -- the architecture -------------------------------------------------------------------------------------

def test_the_architecture_comes_from_the_hub_repository(tmp_path: Path) -> None:
    assert clip_weights.models_for_repo(B32) == ["ViT-B-32"]
    assert clip_weights.models_for_repo(OPENAI_B32) == ["ViT-B-32-quickgelu"]
    b32 = clip_weights.locate(named(tmp_path / "a", B32))
    assert clip.architecture(None, b32) == "ViT-B-32"
    openai = clip_weights.locate(named(tmp_path / "b", OPENAI_B32))
    assert clip.architecture(None, openai) == "ViT-B-32-quickgelu"
    assert clip.architecture("ViT-B-32", openai) == "ViT-B-32-quickgelu"  # built as it was trained
    assert clip.architecture("ViT-B-32", clip_weights.Checkpoint(tmp_path / "x.pt")) == "ViT-B-32"
    with pytest.raises(Refused, match="name it in quality.clip.model \\(scaffold: --clip-model NAME"):
        clip.architecture(None, clip_weights.Checkpoint(tmp_path / "x.pt"))
    with pytest.raises(Refused, match="'ViT-Q-99' is not an open_clip model name"):
        clip.architecture("ViT-Q-99", clip_weights.Checkpoint(tmp_path / "x.pt"))


def test_a_cache_folder_scores_with_the_architecture_beside_the_checkpoint(tmp_path: Path) -> None:
    """No model named: the hub's open_clip_config.json beside the checkpoint builds the tiny architecture."""
    hub_cache(tmp_path / "cache")
    spec = clip.spec_for(ClipSettings(None, "cache"), tmp_path)
    assert spec.model.startswith("local-") and spec.repo == REPO
    cases = [Case(f"p{i}", f"a photograph of object {i}", i) for i in range(3)]
    images = torch.rand(3, 3, 48, 64)
    score = clip.clip_score(images, [c.prompt for c in cases], spec)
    assert math.isfinite(score) and 0.0 <= score <= 100.0
    assert clip.spec_for(ClipSettings("tiny", "cache"), tmp_path).model == "tiny"  # a name of the user's own


def test_a_checkpoint_of_another_architecture_is_refused_when_loaded(tmp_path: Path) -> None:
    weights = save_tiny_clip(tmp_path / "tiny.safetensors")
    wider = {**TINY_CLIP, "text_cfg": {**TINY_CLIP["text_cfg"], "width": 48}}
    (tmp_path / "open_clip_config.json").write_text(json.dumps({"model_cfg": wider}))
    spec = clip.spec_for(ClipSettings("wider", str(weights)), tmp_path)
    with pytest.raises(Refused, match="does not fit open_clip's wider .*quality.clip.model .*--clip-model"):
        clip.clip_score(torch.rand(1, 3, 32, 32), ["a cat"], spec)


def test_refusals_name_the_config_key_and_the_scaffold_flag(tmp_path: Path) -> None:
    with pytest.raises(Refused) as err:
        clip.spec_for(ClipSettings("ViT-B-32", "clip-cache"), tmp_path)
    text = str(err.value)
    assert "does not exist" in text and "quality.clip" in text and "--clip-weights" in text
    assert "cache_dir='clip-cache'" in text and clip.GUIDE in text
    (tmp_path / "empty").mkdir()
    with pytest.raises(Refused, match="quality.clip.weights = 'empty' names no usable checkpoint: the folder"):
        clip.spec_for(ClipSettings("ViT-B-32", "empty"), tmp_path)


def test_a_checkpoint_this_user_cannot_read_is_refused_with_the_chmod(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLIP scores are computed by the harness itself (not in the sandbox), as the user who runs dit-ar."""
    checkpoint = hub_cache(tmp_path / "cache")
    blob = checkpoint.resolve()
    monkeypatch.setattr(clip_weights.os, "access", lambda path, mode: Path(path).resolve() != blob)
    with pytest.raises(Refused, match=f"not readable by this user .*fix: `chmod a\\+r {blob}`"):
        clip.spec_for(ClipSettings(None, "cache"), tmp_path)


# -- where doctor looks ------------------------------------------------------------------------------------

def test_common_places_are_searched_without_guessing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path / "home"))
    root = tmp_path / "project"
    places = clip_weights.common_places(root)
    assert places == [root / "weights", tmp_path / "hf", tmp_path / "home" / ".cache" / "clip"]
    assert clip_weights.search(places, "ViT-B-32") == []
    save_tiny_clip(root / "weights" / "classifier.safetensors")  # some other model's file: not a guess
    assert clip_weights.search(places, "ViT-B-32") == []
    b32 = named(tmp_path / "hf", B32)
    hub_cache(tmp_path / "hf")
    download = save_tiny_clip(tmp_path / "home" / ".cache" / "clip" / "ViT-B-32.pt")
    assert [c.path for c in clip_weights.search(places, "ViT-B-32")] == [b32, download]
    assert len(clip_weights.search(places, None)) == 2  # any open_clip checkpoint of the cache


# -- the config -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["clip", "classifier"])
def test_metric_weights_under_a_mutable_path_are_refused(tmp_path: Path, key: str) -> None:
    """A candidate's commit may change anything under model_under_test/: the model that scores it may not live there."""
    from dit_ar_contract.config import load_config
    from dit_ar_contract.errors import ConfigError
    from tests.unit.test_task_metrics_local import raw_config, write_config

    settings = {"model": "ViT-B-32" if key == "clip" else "resnet50", "weights": "model_under_test/w.safetensors"}
    with pytest.raises(ConfigError, match=f"lanes.embedded-cpu.quality.{key}.weights"):
        load_config(write_config(tmp_path, raw_config(**{key: settings})))
    settings["weights"] = str(tmp_path / "model_under_test" / "w")  # absolute, inside the mutable path
    with pytest.raises(ConfigError, match="outside the mutable 'model_under_test/'"):
        load_config(write_config(tmp_path, raw_config(**{key: settings})))
    settings["weights"] = "weights/w.safetensors"
    assert load_config(write_config(tmp_path, raw_config(**{key: settings})))
