"""A tiny open_clip model with seeded random weights, saved as the tests need it: a checkpoint file, or a Hugging
Face hub cache folder laid out as huggingface_hub writes it with `cache_dir=` (blobs, a snapshot of links, refs/main),
with the hub's open_clip_config.json beside the checkpoint. Nothing is downloaded."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

TINY_CLIP = {"embed_dim": 32, "vision_cfg": {"image_size": 32, "layers": 1, "width": 64, "patch_size": 16},
             "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}
REPO = "dit-ar-tests/tiny-clip"
REVISION = "0123456789abcdef0123456789abcdef01234567"


def save_tiny_clip(path: Path, seed: int = 0) -> Path:
    """The tiny architecture's state_dict as a safetensors file (written 0600, as safetensors does)."""
    import open_clip
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    model = open_clip.CLIP(**TINY_CLIP)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def config_text() -> str:
    """The hub's open_clip_config.json for the tiny architecture."""
    return json.dumps({"model_cfg": TINY_CLIP, "preprocess_cfg": {"mean": [0.48145466, 0.4578275, 0.40821073],
                                                                  "std": [0.26862954, 0.26130258, 0.27577711]}})


def _blob(repo: Path, snapshot: Path, name: str, data: bytes) -> Path:
    digest = hashlib.sha256(data).hexdigest()
    (repo / "blobs" / digest).write_bytes(data)
    (snapshot / name).symlink_to(Path("..", "..", "blobs", digest))
    return snapshot / name


def hub_cache(cache: Path, repo_id: str = REPO, with_config: bool = True, seed: int = 0,
              name: str = "open_clip_model.safetensors") -> Path:
    """A hub cache folder holding `repo_id` at REVISION (refs/main points there); the checkpoint's path in it."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    for folder in (repo / "blobs", repo / "refs", snapshot):
        folder.mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    scratch = save_tiny_clip(cache / ".scratch" / name, seed)
    checkpoint = _blob(repo, snapshot, name, scratch.read_bytes())
    scratch.unlink()
    (cache / ".scratch").rmdir()
    if with_config:
        _blob(repo, snapshot, "open_clip_config.json", config_text().encode())
    return checkpoint
