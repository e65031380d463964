"""CLIP score with open_clip from a local weights file named in the quality contract (never downloaded).

Config (``quality.clip``, overridable per lane)::

    "clip": {"model": "ViT-B-32", "weights": "weights/open_clip_vit_b32.safetensors"}

``weights`` is relative to the repository root (or absolute). The score is torchmetrics'
definition: mean over images of max(100 * cos(image embedding, prompt embedding), 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dit_ar_contract.config import QualityContract
from dit_ar_contract.errors import Refused

if TYPE_CHECKING:  # torch is imported where a score is computed: the setup checks (doctor) stay light
    import torch

HOW_TO = ("CLIP weights are never downloaded by the harness. On a machine with internet access, pick a tag with\n"
          "  python -c \"import open_clip; print(open_clip.list_pretrained_tags_by_model('{model}'))\"\n"
          "fetch it with\n"
          "  python -c \"import open_clip; "
          "open_clip.create_model('{model}', pretrained='<tag>', cache_dir='clip-cache')\"\n"
          "copy the checkpoint file from clip-cache/ to {path} and name it in config/autoresearch.json under "
          "quality.clip (or lanes.<lane>.quality.clip): {{\"model\": \"{model}\", \"weights\": \"<path>\"}}.")


@dataclass(frozen=True)
class ClipSpec:
    model: str
    weights: Path


def clip_spec(quality: QualityContract, root: Path) -> ClipSpec:
    """The configured open_clip model and its local weights file; a setup error when absent."""
    model, weights = quality.clip.model, quality.clip.weights
    if not model or not weights:
        raise Refused("clip_score is a required metric but the quality contract names no CLIP model and weights "
                      "(key quality.clip).\n" + HOW_TO.format(model=model or "ViT-B-32", path="weights/"))
    path = Path(weights) if Path(weights).is_absolute() else Path(root) / weights
    if not path.is_file():
        raise Refused(f"clip_score is a required metric but its weights file {path} does not exist "
                      f"(quality.clip.weights = {weights!r}).\n" + HOW_TO.format(model=model, path=path))
    import open_clip

    if model not in open_clip.list_models():
        raise Refused(f"quality.clip.model {model!r} is not an open_clip model name; known: "
                      f"{', '.join(open_clip.list_models()[:12])}, ...")
    text = (open_clip.get_model_config(model) or {}).get("text_cfg", {})
    if text.get("hf_tokenizer_name") or text.get("hf_model_name"):
        raise Refused(f"quality.clip.model {model!r} takes its tokenizer or text tower from the Hugging Face hub, "
                      "which the harness never downloads; pick an open_clip model with the built-in tokenizer "
                      "(e.g. ViT-B-32, ViT-B-16, ViT-L-14)")
    return ClipSpec(model, path)


@lru_cache(maxsize=2)
def _load(model: str, weights: str) -> tuple[Any, Any]:
    import open_clip

    net = open_clip.create_model(model, pretrained=weights, device="cpu").eval().requires_grad_(False)
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
