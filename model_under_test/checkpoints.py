"""Loading real checkpoints from a local diffusers folder (never from the network).

A lane points at real weights with ``"weights": "<folder>"`` (absolute, or relative to
the repository root). The folder has the layout ``DiffusionPipeline.save_pretrained``
writes::

    <folder>/model_index.json
    <folder>/transformer/config.json + diffusion_pytorch_model*.safetensors
    <folder>/scheduler/scheduler_config.json
    <folder>/vae/config.json + weights                  (DiT-XL/2, PixArt-Sigma)
    <folder>/text_encoder/config.json + weights         (PixArt-Sigma)
    <folder>/tokenizer/...                              (PixArt-Sigma, optional)

Every ``from_pretrained`` call passes ``local_files_only=True``. Anything missing
raises ``MissingWeightsError`` naming the file that was expected and where.
"""

from __future__ import annotations

import json
from pathlib import Path

import diffusers
import torch


class MissingWeightsError(FileNotFoundError, ValueError):
    """A weights folder or file is missing. Weights are never downloaded."""


_NEVER = "model_under_test loads weights only from local folders and never downloads them"


def resolve_weights_dir(spec: dict) -> Path:
    raw = spec.get("weights")
    path = Path(str(raw)).expanduser()
    if not path.is_absolute():
        path = Path(spec.get("root") or ".") / path
    path = path.resolve()
    if not path.is_dir():
        raise MissingWeightsError(
            f"weights folder {path} does not exist (lane weights={raw!r}, resolved against root "
            f"{spec.get('root')!r}); expected a diffusers folder with model_index.json; {_NEVER}"
        )
    if not (path / "model_index.json").is_file():
        raise MissingWeightsError(f"expected model_index.json at {path / 'model_index.json'}; {_NEVER}")
    return path


def require(folder: Path, subfolder: str, config_name: str = "config.json") -> Path:
    sub = folder / subfolder
    if not (sub / config_name).is_file():
        raise MissingWeightsError(f"expected {subfolder}/{config_name} at {sub / config_name}; {_NEVER}")
    return sub


def torch_dtype(spec: dict, default: str = "float32") -> torch.dtype:
    name = (spec.get("options") or {}).get("dtype") or default
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"options.dtype={name!r} is not a torch dtype (e.g. float32, bfloat16, float16)")
    return dtype


def load_scheduler(folder: Path):
    sub = require(folder, "scheduler", "scheduler_config.json")
    name = json.loads((sub / "scheduler_config.json").read_text()).get("_class_name")
    cls = getattr(diffusers, str(name), None)
    if cls is None:
        raise ValueError(f"{sub / 'scheduler_config.json'} names an unknown diffusers scheduler {name!r}")
    return cls.from_pretrained(folder, subfolder="scheduler", local_files_only=True)


def _load_model(cls, folder: Path, subfolder: str, device, dtype):
    require(folder, subfolder)
    model = cls.from_pretrained(folder, subfolder=subfolder, local_files_only=True, torch_dtype=dtype,
                                low_cpu_mem_usage=False)
    return model.to(device).eval().requires_grad_(False)


def load_class_conditional_folder(spec: dict, need_vae: bool, default_dtype: str = "float32"):
    """(transformer, scheduler, vae-or-None) for the DiT-style presets."""
    from diffusers import AutoencoderKL, DiTTransformer2DModel

    folder = resolve_weights_dir(spec)
    require(folder, "transformer")
    require(folder, "scheduler", "scheduler_config.json")
    if need_vae:
        require(folder, "vae")
    device = spec.get("device") or "cpu"
    dtype = torch_dtype(spec, default_dtype)
    transformer = _load_model(DiTTransformer2DModel, folder, "transformer", device, dtype)
    scheduler = load_scheduler(folder)
    vae = None
    if need_vae or (folder / "vae").is_dir():
        vae = _load_model(AutoencoderKL, folder, "vae", device, dtype)
    return transformer, scheduler, vae


def load_text_to_image_folder(spec: dict, default_dtype: str):
    """(tokenizer, text_encoder, transformer, vae, scheduler) for PixArt-Sigma."""
    from diffusers import AutoencoderKL, PixArtTransformer2DModel
    from transformers import T5EncoderModel

    from .prompts import HashTokenizer

    folder = resolve_weights_dir(spec)
    for sub in ("transformer", "vae", "text_encoder"):
        require(folder, sub)
    require(folder, "scheduler", "scheduler_config.json")
    device = spec.get("device") or "cuda"
    dtype = torch_dtype(spec, default_dtype)
    options = spec.get("options") or {}
    max_length = int(options.get("max_sequence_length", 300))
    transformer = _load_model(PixArtTransformer2DModel, folder, "transformer", device, dtype)
    vae = _load_model(AutoencoderKL, folder, "vae", device, torch.float32)
    require(folder, "text_encoder")
    text_encoder = T5EncoderModel.from_pretrained(folder / "text_encoder", local_files_only=True, dtype=dtype)
    text_encoder = text_encoder.to(device).eval().requires_grad_(False)
    tokenizer = HashTokenizer(text_encoder.config.vocab_size, max_length)
    if (folder / "tokenizer").is_dir():
        from transformers import AutoTokenizer

        hf_tok = AutoTokenizer.from_pretrained(folder / "tokenizer", local_files_only=True)

        def tokenizer(prompts, _tok=hf_tok):  # noqa: F811 - real tokenizer replaces the hash one
            enc = _tok(prompts, padding="max_length", max_length=max_length, truncation=True,
                       add_special_tokens=True, return_tensors="pt")
            return {"input_ids": enc.input_ids, "attention_mask": enc.attention_mask}

    return tokenizer, text_encoder, transformer, vae, load_scheduler(folder)


def save_local_folder(pipe, folder) -> Path:
    """Write a pipeline's components as a diffusers folder that ``weights`` can point at."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    index = {"_class_name": type(pipe).__name__, "_diffusers_version": diffusers.__version__}
    parts = dict(pipe.components)
    parts["scheduler"] = pipe.scheduler
    for name, part in parts.items():
        if part is None:
            continue
        part.save_pretrained(folder / name)
        library = "transformers" if type(part).__module__.startswith("transformers") else "diffusers"
        index[name] = [library, type(part).__name__]
    (folder / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    return folder
