"""CLIP score with open_clip from local weights named in the quality contract (never downloaded).

Config (``quality.clip``, overridable per lane)::

    "clip": {"model": "ViT-B-32", "weights": "weights/open_clip_vit_b32.safetensors"}

``weights`` is relative to the repository root (or absolute): a checkpoint file, a folder holding one, or a
Hugging Face hub cache folder (clip_weights.py finds the checkpoint, offline). ``model`` is the open_clip
architecture; it may be left out when the checkpoint's folder carries the hub's ``open_clip_config.json`` or its
cached hub repository belongs to one architecture only. The score is torchmetrics' definition: mean over images
of max(100 * cos(image embedding, prompt embedding), 0).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dit_ar_contract.config import ClipSettings, QualityContract
from dit_ar_contract.errors import Refused
from dit_ar_contract.guides import cite

from . import clip_weights

if TYPE_CHECKING:  # torch is imported where a score is computed: the setup checks (doctor) stay light
    import torch

GUIDE = cite("clip-weights")
HOW_TO = ("CLIP weights are never downloaded by the harness. On a machine with internet access, fetch them into a "
          "cache folder with\n"
          "  python -c \"import open_clip; "
          "open_clip.create_model('{model}', pretrained='laion2b_s34b_b79k', cache_dir='clip-cache')\"\n"
          "(other tags: open_clip.list_pretrained_tags_by_model('{model}')), copy clip-cache/ to this machine and name "
          "it: quality.clip in config/autoresearch.json (or lanes.<lane>.quality.clip), "
          "{{\"model\": \"{model}\", \"weights\": \"<the folder or the checkpoint file in it>\"}}, with "
          "\"clip_score\" in lanes.<lane>.task_metrics; or scaffold the lane with "
          "`dit-ar scaffold --pipeline PATH --clip-weights <folder> --clip-model {model}`. See " + GUIDE + ".")


@dataclass(frozen=True)
class ClipSpec:
    model: str  # a name open_clip knows in this process (a folder's open_clip_config.json is registered)
    weights: Path  # the checkpoint file
    repo: str | None = None  # the hub repository it was cached from


def clip_spec(quality: QualityContract, root: Path) -> ClipSpec:
    """The configured open_clip model and its local checkpoint; a setup error when absent."""
    return spec_for(quality.clip, root)


def spec_for(settings: ClipSettings, root: Path) -> ClipSpec:
    """The open_clip architecture and checkpoint file `settings` name, found offline; refused with the fix."""
    model, weights = settings.model, settings.weights
    if not weights:
        raise Refused("clip_score is a required metric but the quality contract names no CLIP model and weights "
                      "(key quality.clip.weights).\n" + HOW_TO.format(model=model or "ViT-B-32"))
    path = Path(weights) if Path(weights).is_absolute() else Path(root) / weights
    if not path.exists():
        raise Refused(f"clip_score is a required metric but its weights file {path} does not exist "
                      f"(quality.clip.weights = {weights!r}).\n" + HOW_TO.format(model=model or "ViT-B-32"))
    try:
        found = clip_weights.locate(path, model)
    except Refused as exc:
        raise Refused(f"clip_score is a required metric but quality.clip.weights = {weights!r} names no usable "
                      f"checkpoint: {exc}") from None
    problem = clip_weights.unreadable(found)
    if problem:
        raise Refused(f"clip_score is a required metric but {problem}")
    name = architecture(model, found)
    _refuse_hub_text(name)
    return ClipSpec(name, found.path, found.repo)


def architecture(model: str | None, found: clip_weights.Checkpoint) -> str:
    """The open_clip name to build: `model` when open_clip knows it, else the checkpoint's open_clip_config.json
    (registered under `model` or a name derived from it), else the one architecture of its cached repository."""
    import open_clip

    if model and model in open_clip.list_models():
        return clip_weights.fitting(model, found.repo)
    if found.config is not None:
        return _register(model, found.config)
    if model:
        raise Refused(f"quality.clip.model {model!r} is not an open_clip model name and {found.path.parent} has no "
                      f"{clip_weights.CONFIG_NAME}; known: {', '.join(open_clip.list_models()[:12])}, ...")
    candidates = clip_weights.models_for_repo(found.repo) if found.repo else []
    if len(candidates) == 1:
        return candidates[0]
    raise Refused(f"the open_clip architecture of {found.path} is not known: name it in quality.clip.model (scaffold: "
                  "--clip-model NAME, e.g. ViT-B-32)" + (f"; its repository {found.repo} serves "
                                                         f"{', '.join(candidates)}" if candidates else ""))


def _register(model: str | None, config: Path) -> str:
    """Register the architecture in an open_clip_config.json (the hub's format: {"model_cfg": ...}) with
    open_clip, under `model` or a name derived from its content; the name."""
    import open_clip

    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Refused(f"{config} cannot be read as an open_clip config: {exc}; name the architecture in "
                      "quality.clip.model (scaffold: --clip-model NAME)") from None
    cfg = data.get("model_cfg", data) if isinstance(data, dict) else None
    if not isinstance(cfg, dict) or not all(k in cfg for k in ("embed_dim", "vision_cfg", "text_cfg")):
        raise Refused(f"{config} holds no open_clip architecture (model_cfg with embed_dim, vision_cfg, text_cfg)"
                      "; name the architecture in quality.clip.model (scaffold: --clip-model NAME)")
    name = model or "local-" + hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:12]
    if open_clip.get_model_config(name) != cfg:
        with tempfile.TemporaryDirectory() as tmp:  # open_clip keeps what it read; the file may go
            (Path(tmp) / f"{name}.json").write_text(json.dumps(cfg), encoding="utf-8")
            open_clip.add_model_config(Path(tmp) / f"{name}.json")
    return name


def _refuse_hub_text(model: str) -> None:
    import open_clip

    text = (open_clip.get_model_config(model) or {}).get("text_cfg", {})
    if text.get("hf_tokenizer_name") or text.get("hf_model_name"):
        raise Refused(f"quality.clip.model {model!r} takes its tokenizer or text tower from the Hugging Face hub, "
                      "which the harness never downloads; pick an open_clip model with the built-in tokenizer "
                      "(e.g. ViT-B-32, ViT-B-16, ViT-L-14)")


@lru_cache(maxsize=2)
def _load(model: str, weights: str) -> tuple[Any, Any]:
    import open_clip

    try:
        net = open_clip.create_model(model, pretrained=weights, device="cpu").eval().requires_grad_(False)
    except (RuntimeError, AssertionError, KeyError, ValueError) as exc:  # a state_dict of another architecture
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Refused(f"the CLIP checkpoint {weights} does not fit open_clip's {model} ({first[:300]}); set "
                      "quality.clip.model (scaffold: --clip-model) to the checkpoint's architecture") from None
    return net, open_clip.get_tokenizer(model)


def _preprocess(images: torch.Tensor, cfg: dict[str, Any]) -> torch.Tensor:
    """[N, 3, H, W] in [0, 1] -> the model's input: shortest side resized, centre crop, normalised."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - torch's own name

    size = cfg.get("size", 224)
    h, w = (size, size) if isinstance(size, int) else size
    x = images.float().clamp(0, 1)
    scale = max(h / x.shape[-2], w / x.shape[-1])
    new = (max(h, round(x.shape[-2] * scale)), max(w, round(x.shape[-1] * scale)))
    x = F.interpolate(x, size=new, mode="bicubic", align_corners=False, antialias=True).clamp(0, 1)
    top, left = (new[0] - h) // 2, (new[1] - w) // 2
    x = x[..., top:top + h, left:left + w]
    mean = torch.tensor(cfg.get("mean", (0.48145466, 0.4578275, 0.40821073))).view(1, 3, 1, 1)
    std = torch.tensor(cfg.get("std", (0.26862954, 0.26130258, 0.27577711))).view(1, 3, 1, 1)
    return (x - mean) / std


def clip_scores(images: torch.Tensor, prompts: list[str], spec: ClipSpec, batch: int = 32) -> torch.Tensor:
    """Each image's CLIP score with its prompt: max(100 * cosine(image, prompt), 0), float64 [N]."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - torch's own name

    net, tokenizer = _load(spec.model, str(spec.weights))
    cfg = getattr(net.visual, "preprocess_cfg", {}) or {}
    scores = []
    with torch.inference_mode():
        for i in range(0, len(images), batch):
            img = net.encode_image(_preprocess(images[i:i + batch].cpu(), cfg))
            txt = net.encode_text(tokenizer(prompts[i:i + batch]))
            scores.append((100 * F.cosine_similarity(img.float(), txt.float(), dim=-1)).clamp_min(0))
    return torch.cat(scores).double() if scores else torch.zeros(0, dtype=torch.float64)


def clip_score(images: torch.Tensor, prompts: list[str], spec: ClipSpec, batch: int = 32) -> float:
    """Mean over images of max(100 * cosine(image, prompt), 0)."""
    scores = clip_scores(images, prompts, spec, batch)
    return float(scores.mean()) if len(scores) else 0.0
