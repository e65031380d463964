"""What `dit-ar doctor` says about the CLIP weights: the checkpoint the config names, or where it looked for one
(the configured path, the project's weights/, the Hugging Face hub cache, open_clip's download folder) and exactly
what to put where. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

from dit_ar_contract.config import ClipSettings
from dit_ar_contract.errors import Refused
from quality_suite import clip, clip_weights

FETCH = ("python -c \"import open_clip; open_clip.create_model('{model}', pretrained='laion2b_s34b_b79k', "
         "cache_dir='clip-cache')\"")


def _configured(settings: ClipSettings, root: Path) -> Path | None:
    if not settings.weights:
        return None
    path = Path(settings.weights)
    return path if path.is_absolute() else root / path


def _use(found: clip_weights.Checkpoint, settings: ClipSettings, lane: str) -> str:
    """The exact config change (and scaffold flag) that names a found checkpoint."""
    try:
        model = clip.architecture(settings.model, found)
    except Refused:
        model = settings.model or "<its architecture, e.g. ViT-B-32>"
    named = model if found.config is None else (settings.model or None)
    value = f'{{"model": "{named}", "weights": "{found.path}"}}' if named else f'{{"weights": "{found.path}"}}'
    return (f"found {found.describe()}: to use it, set lanes.{lane}.quality.clip to {value} in "
            f"config/autoresearch.json (a new scaffold: --clip-weights {found.path}"
            + (f" --clip-model {named})" if named else ")"))


def clip_hints(settings: ClipSettings, root: Path, lane: str) -> list[str]:
    """Lines under doctor's clip_score line: the checkpoint in use, or the ones found elsewhere, or how to get one."""
    try:
        spec = clip.spec_for(settings, root)
        return [f"open_clip {spec.model} from {spec.weights}" + (f" (hub repository {spec.repo})" if spec.repo
                                                                  else "")]
    except ImportError:  # open_clip missing: the packages line says what to install
        return []
    except Refused:
        pass
    places = [p for p in (_configured(settings, root), *clip_weights.common_places(root)) if p is not None]
    try:
        found = clip_weights.search(places, settings.model)
    except Refused as exc:  # a cache folder that cannot be read is named, not a crash
        return [f"looking for CLIP weights: {exc}"]
    if found:
        return [_use(f, settings, lane) for f in found[:3]]
    model = settings.model or "ViT-B-32"
    target = Path.home() / "clip-cache"
    return [f"no CLIP weights found in {', '.join(str(p) for p in dict.fromkeys(places))}",
            f"on a machine with internet: {FETCH.format(model=model)}; copy clip-cache/ to {target} here, set "
            f'lanes.{lane}.quality.clip to {{"model": "{model}", "weights": "{target}"}} and add "clip_score" to '
            f"lanes.{lane}.task_metrics (a new scaffold: --clip-weights {target}; see {clip.GUIDE})"]
