"""LPIPS (torchmetrics) per case, only where the backbone's ImageNet weights are already in the torch hub cache.

Config (``quality.lpips``, overridable per lane)::

    "lpips": {"net": "alex", "required": false}

Missing weights make LPIPS ``unavailable`` (reported, never counted as a pass); with
``required: true`` they are a setup error. The linear LPIPS heads ship inside torchmetrics.
"""

from __future__ import annotations

from pathlib import Path

import torch

from dit_ar_contract.config import QualityContract
from dit_ar_contract.errors import Refused

BACKBONES = {"alex": "alexnet", "vgg": "vgg16", "squeeze": "squeezenet1_1"}
WEIGHT_ENUMS = {"alexnet": "AlexNet_Weights", "vgg16": "VGG16_Weights", "squeezenet1_1": "SqueezeNet1_1_Weights"}
HOW_TO = ("LPIPS needs the torchvision ImageNet weights of its backbone in the torch hub cache; the harness never "
          "downloads them. On a machine with internet access run\n"
          "  python -c \"import torchvision; torchvision.models.{arch}(weights='DEFAULT')\"\n"
          "and copy {name} into {folder} here (or point TORCH_HOME at a folder whose hub/checkpoints holds it).")


def settings(quality: QualityContract) -> tuple[str, bool]:
    """(net, required) from the quality contract."""
    if quality.lpips.net not in BACKBONES:
        raise Refused(f"quality.lpips.net is {quality.lpips.net!r}; expected one of {sorted(BACKBONES)}")
    return quality.lpips.net, quality.lpips.required


def backbone_file(net: str) -> Path:
    """Where torchvision keeps the backbone's weights once fetched (torch hub cache)."""
    import torchvision

    arch = BACKBONES[net]
    url = getattr(torchvision.models, WEIGHT_ENUMS[arch]).DEFAULT.url
    return Path(torch.hub.get_dir()) / "checkpoints" / url.rsplit("/", 1)[-1]


def unavailable_reason(net: str) -> str | None:
    """None when LPIPS can be computed offline, else how to make it possible."""
    path = backbone_file(net)
    if path.is_file():
        return None
    return HOW_TO.format(arch=BACKBONES[net], name=path.name, folder=path.parent)


def check(quality: QualityContract) -> None:
    """A lane that requires LPIPS without its weights cannot be judged (setup error)."""
    net, required = settings(quality)
    reason = unavailable_reason(net) if required else None
    if reason:
        raise Refused(f"LPIPS is required (quality.lpips.required) but {backbone_file(net)} is missing.\n{reason}")


@torch.inference_mode()
def lpips_per_case(cand: dict[str, torch.Tensor], base: dict[str, torch.Tensor], net: str) -> dict[str, float]:
    """LPIPS of each candidate image [3, H, W] against the baseline's (lower is closer)."""
    from torchmetrics.image.lpip import LearnedPerceptualImagePatchSimilarity

    metric = LearnedPerceptualImagePatchSimilarity(net_type=net, reduction="none", normalize=True)
    out = {}
    for cid, b in base.items():
        if cid in cand and cand[cid].shape == b.shape:
            c_img, b_img = cand[cid].float().clamp(0, 1)[None], b.float().clamp(0, 1)[None]
            out[cid] = float(metric.net(c_img, b_img, normalize=True).flatten()[0])
    return out


def evaluate(cand: dict[str, torch.Tensor], base: dict[str, torch.Tensor],
             quality: QualityContract) -> tuple[dict[str, float] | None, str]:
    """(per-case LPIPS or None, status line for quality.json: 'computed with <net>' or 'unavailable: ...')."""
    net, _ = settings(quality)
    reason = unavailable_reason(net)
    if reason:
        return None, f"unavailable: {backbone_file(net)} not in the torch hub cache"
    return lpips_per_case(cand, base, net), f"computed with {net}"
