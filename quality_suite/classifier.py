"""ImageNet top-1 class of generated images with a torchvision classifier from a local weights file (never downloaded).

Config (``quality.classifier``, overridable per lane)::

    "classifier": {"model": "resnet50", "weights": "weights/resnet50_imagenet1k_v2.safetensors",
                   "resize": 232, "crop": 224, "interpolation": "bilinear"}

``model`` is a torchvision classification architecture, built with ``weights=None`` and filled from
``weights`` (a state_dict saved with ``torch.save`` or safetensors), relative to the repository root
or absolute. Images are prepared the way torchvision's ImageNet weights expect: shorter side resized
to ``resize`` (``interpolation``, antialiased), centre crop of ``crop``, ImageNet mean and standard deviation;
the three settings are the ones the weights' ``transforms()`` print in torchvision.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from dit_ar_contract.config import QualityContract
from dit_ar_contract.errors import Refused
from dit_ar_contract.guides import cite

if TYPE_CHECKING:  # torch is imported where a score is computed: the setup checks (doctor) stay light
    import torch

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
LIST_MODELS = "torchvision.models.list_models(module=torchvision.models)"

HOW_TO = ("Classifier weights are never downloaded by the harness. On a machine with internet access run\n"
          "  python -c \"import torch, torchvision as tv; w = tv.models.get_model_weights('{model}').DEFAULT; "
          "m = tv.models.get_model('{model}', weights=w); torch.save(m.state_dict(), '{model}.pth'); "
          "print(w.transforms())\"\n"
          "copy {model}.pth to {path} and name it in config/autoresearch.json under quality.classifier "
          "(or lanes.<lane>.quality.classifier): {{\"model\": \"{model}\", \"weights\": \"<path>\", "
          "\"resize\": <resize_size>, \"crop\": <crop_size>, \"interpolation\": \"<printed, lower case>\"}}; "
          "step by step: " + cite("task-metrics") + ".")


@dataclass(frozen=True)
class ClassifierSpec:
    """A resolved classifier setting: architecture, existing weights file and the input geometry."""

    model: str
    weights: Path
    resize: int
    crop: int
    interpolation: str = "bilinear"


def supported_models() -> list[str]:
    """The torchvision classification architectures (no detection, segmentation or video models)."""
    import torchvision

    return torchvision.models.list_models(module=torchvision.models)


def classifier_spec(quality: QualityContract, root: Path) -> ClassifierSpec:
    """The configured classifier and its local weights file; a setup error that says how to fix it."""
    model, weights = quality.classifier.model, quality.classifier.weights
    if not model or not weights:
        raise Refused("classifier_top1 is a required metric but the quality contract names no classifier model and "
                      "weights (key quality.classifier).\n" + HOW_TO.format(model=model or "resnet50",
                                                                           path="weights/"))
    if model not in supported_models():
        raise Refused(f"quality.classifier.model {model!r} is not a torchvision classification architecture; "
                      f"use a name listed by {LIST_MODELS}, e.g. resnet50, vit_b_16, convnext_tiny")
    path = Path(weights) if Path(weights).is_absolute() else Path(root) / weights
    if not path.is_file():
        raise Refused(f"classifier_top1 is a required metric but its weights file {path} does not exist "
                      f"(quality.classifier.weights = {weights!r}).\n" + HOW_TO.format(model=model, path=path))
    c = quality.classifier
    return ClassifierSpec(model, path, c.resize, c.crop, c.interpolation)


def check(quality: QualityContract, root: Path) -> None:
    """Refuse unless the classifier is configured and its weights file loads into the architecture."""
    spec = classifier_spec(quality, root)
    _load(spec.model, str(spec.weights), _stamp(spec.weights))


def _stamp(path: Path) -> tuple[int, int]:
    """Modification time and size: a replaced weights file is loaded again, not served from the cache."""
    st = path.stat()
    return (st.st_mtime_ns, st.st_size)


def _state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a .safetensors file or of a torch.save'd state_dict (loaded without unpickling code)."""
    import torch

    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same setup error
        raise Refused(f"the classifier weights file {path} cannot be read ({type(exc).__name__}: "
                      f"{str(exc).splitlines()[0] if str(exc) else ''}); save it again with "
                      "`torch.save(model.state_dict(), PATH)`") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise Refused(f"the classifier weights file {path} is not a state_dict (save model.state_dict(), "
                      "not the model or a training checkpoint)")
    return state


@lru_cache(maxsize=2)
def _load(model: str, weights: str, stamp: tuple[int, int]) -> torch.nn.Module:
    import torchvision

    net = torchvision.models.get_model(model, weights=None)
    try:
        net.load_state_dict(_state_dict(Path(weights)))
    except RuntimeError as exc:
        raise Refused(f"the classifier weights file {weights} does not fit torchvision's {model}: "
                      f"{' '.join(str(exc).split())[:400]}; set quality.classifier.model to the architecture the "
                      "weights are of") from None
    return net.eval().requires_grad_(False)


def preprocess(images: torch.Tensor, resize: int, crop: int, interpolation: str = "bilinear") -> torch.Tensor:
    """[N, 3, H, W] in [0, 1] -> shorter side `resize` (antialiased), centre crop `crop`, ImageNet-normalised."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - torch's own name

    x = images.float().clamp(0, 1)
    h, w = x.shape[-2:]
    short = min(h, w)
    size = (max(crop, int(resize * h / short)), max(crop, int(resize * w / short)))
    x = F.interpolate(x, size=size, mode=interpolation, align_corners=False, antialias=True)
    top, left = round((size[0] - crop) / 2), round((size[1] - crop) / 2)
    x = x[..., top:top + crop, left:left + crop]
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    return (x - mean) / std


def logits(images: torch.Tensor, spec: ClassifierSpec, batch: int = 32) -> torch.Tensor:
    """[N, classes] scores per image, on the CPU (the same numbers for the baseline and every candidate)."""
    import torch

    net = _load(spec.model, str(spec.weights), _stamp(spec.weights))
    with torch.inference_mode():
        prep = [preprocess(images[i:i + batch].cpu(), spec.resize, spec.crop, spec.interpolation)
                for i in range(0, len(images), batch)]
        return torch.cat([net(x) for x in prep]).float()
