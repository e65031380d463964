"""Where local open_clip weights are, read offline: a checkpoint file, a folder holding one, or a Hugging Face hub
cache folder (the one open_clip and huggingface_hub write with `cache_dir=`, or ~/.cache/huggingface/hub).

Nothing here downloads or asks the network (HF_HUB_OFFLINE semantics): a cache folder is read with
huggingface_hub's own scanner, and the revision `main` points at is the one taken, as an offline
`hf_hub_download` would. In a cache only open_clip's own checkpoint names count (the hub's open_clip repositories
all carry one), so a text encoder or a diffusers pipeline cached beside them is never mistaken for CLIP.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from dit_ar_contract.errors import Refused
from dit_ar_contract.guides import cite

SUFFIXES = (".safetensors", ".bin", ".pth", ".pt")
# open_clip's own order of preference for a checkpoint in a folder (safetensors first)
PREFERRED = ("open_clip_model.safetensors", "open_clip_pytorch_model.safetensors", "open_clip_pytorch_model.bin",
             "open_clip_pytorch_model.pth", "model.safetensors", "pytorch_model.bin", "pytorch_model.pth", "model.pth")
OPEN_CLIP_NAMES = PREFERRED[:4]
CONFIG_NAME = "open_clip_config.json"  # the architecture, beside the checkpoint in the hub's open_clip repositories
REPO_PREFIX = "models--"


@dataclass(frozen=True)
class Checkpoint:
    """One open_clip checkpoint on this machine."""

    path: Path  # the file open_clip loads (in a hub cache: the snapshot's link to its blob)
    config: Path | None = None  # open_clip_config.json beside it
    repo: str | None = None  # the hub repository it was cached from

    def describe(self) -> str:
        return f"{self.path}" + (f" (hub repository {self.repo})" if self.repo else "")


def _listing(folder: Path, limit: int = 8) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
    return ", ".join(names[:limit]) + (", ..." if len(names) > limit else "") if names else "nothing"


def _is_checkpoint(path: Path) -> bool:
    return path.suffix in SUFFIXES and path.is_file()


def _repo_of(path: Path) -> str | None:
    """The hub repository of a file inside a cache (`models--org--name/snapshots/<rev>/...`), else None."""
    for parent in path.parents:
        if parent.name.startswith(REPO_PREFIX):
            return parent.name[len(REPO_PREFIX):].replace("--", "/")
    return None


@lru_cache(maxsize=1)
def _registry() -> dict[str, dict[str, tuple[tuple[str, ...], bool]]]:
    """open_clip's pretrained tags: architecture -> hub repository -> (the checkpoint names open_clip fetches from
    it, its safetensors alternative first; whether those weights were trained with QuickGELU)."""
    import open_clip

    found: dict[str, dict[str, tuple[tuple[str, ...], bool]]] = {}
    for model, tag in open_clip.list_pretrained():
        cfg = open_clip.get_pretrained_cfg(model, tag)
        repo, name = os.path.split(cfg.get("hf_hub", ""))
        if repo:
            names = (Path(name).stem + ".safetensors", name) if name else ()
            found.setdefault(model, {})[repo] = (tuple(dict.fromkeys((*names, *OPEN_CLIP_NAMES))),
                                                 bool(cfg.get("quick_gelu")))
    return found


def hub_files(model: str | None) -> dict[str, tuple[str, ...]]:
    """The hub repositories open_clip's pretrained tags of `model` come from, each with its checkpoint names."""
    return {repo: names for repo, (names, _) in _registry().get(model or "", {}).items()}


def _quick_gelu(model: str) -> bool:
    import open_clip

    return bool((open_clip.get_model_config(model) or {}).get("quick_gelu"))


def models_for_repo(repo: str) -> list[str]:
    """The open_clip architectures that build the weights of hub repository `repo` as they were trained (the
    `-quickgelu` variant where the weights need QuickGELU)."""
    return sorted(model for model, repos in _registry().items()
                  if repo in repos and repos[repo][1] == _quick_gelu(model))


def fitting(model: str, repo: str | None) -> str:
    """`model`, or its `-quickgelu` variant when the weights cached from `repo` were trained with QuickGELU (as
    open_clip's `openai` and MetaCLIP tags were) and `model` lacks it: open_clip would build them wrong silently."""
    import open_clip

    trained = _registry().get(model, {}).get(repo or "", ((), False))[1]
    variant = f"{model}-quickgelu"
    return variant if trained and not _quick_gelu(model) and variant in open_clip.list_models() else model


def _names_for_repo(repo: str) -> tuple[str, ...]:
    named = [name for repos in _registry().values() for name in repos.get(repo, ((), False))[0]]
    return tuple(dict.fromkeys((*named, *OPEN_CLIP_NAMES)))


def url_names(model: str | None) -> set[str]:
    """File names of `model`'s checkpoints that open_clip downloads from a URL (into ~/.cache/clip by default)."""
    if not model:
        return set()
    import open_clip

    return {os.path.basename(open_clip.get_pretrained_cfg(model, tag).get("url", ""))
            for tag in open_clip.list_pretrained_tags_by_model(model)} - {""}


def _pick(files: list[Path], folder: Path, model: str | None, strict: bool) -> Path | None:
    """The checkpoint among `files` open_clip would take (its preferred names, then a file named for `model`'s
    download, then the only one); None when there is none; refused when several are equally likely."""
    names = {p.name: p for p in files}
    for name in PREFERRED if not strict else OPEN_CLIP_NAMES:
        if name in names:
            return names[name]
    for name in sorted(url_names(model)):
        if name in names:
            return names[name]
    if strict or not files:
        return None
    if len(files) == 1:
        return files[0]
    raise Refused(f"{folder} holds several checkpoints ({', '.join(sorted(names))}) and none is open_clip's own "
                  "name: name the file itself in quality.clip.weights (scaffold: --clip-weights FILE)")


def _from_folder(folder: Path, model: str | None, strict: bool) -> Checkpoint | None:
    chosen = _pick(sorted(p for p in folder.iterdir() if _is_checkpoint(p)), folder, model, strict)
    if chosen is None:
        return None
    config = folder / CONFIG_NAME
    return Checkpoint(chosen, config if config.is_file() else None, _repo_of(chosen))


def is_hub_cache(folder: Path) -> bool:
    return folder.name.startswith(REPO_PREFIX) or any(p.name.startswith(REPO_PREFIX) and p.is_dir()
                                                      for p in folder.iterdir())


def _cached(folder: Path) -> list[Checkpoint]:
    """Every open_clip checkpoint of a hub cache folder (or of one `models--org--name` folder in it), at the
    revision `main` points at (else the newest)."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.utils import CacheNotFound, CorruptedCacheException

    only = folder.name[len(REPO_PREFIX):].replace("--", "/") if folder.name.startswith(REPO_PREFIX) else None
    try:
        info = scan_cache_dir(folder.parent if only else folder)
    except (CacheNotFound, CorruptedCacheException, OSError) as exc:
        raise Refused(f"{folder} cannot be read as a Hugging Face hub cache folder: {exc}; name the checkpoint file "
                      "itself in quality.clip.weights") from None
    found = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model" or (only and repo.repo_id != only) or not repo.revisions:
            continue
        revision = repo.refs.get("main") or max(repo.revisions, key=lambda r: r.last_modified)
        top = {f.file_name: f.file_path for f in revision.files if f.file_path.parent == revision.snapshot_path}
        for name in _names_for_repo(repo.repo_id):
            if name in top:
                config = top.get(CONFIG_NAME)
                found.append(Checkpoint(top[name], config, repo.repo_id))
                break
    return found


def _of_model(found: list[Checkpoint], model: str | None) -> list[Checkpoint]:
    """The cached checkpoints that are `model`'s (every one when open_clip knows no pretrained tags of it)."""
    known = hub_files(model)
    return [c for c in found if not known or c.repo in known]


def _from_cache(folder: Path, model: str | None) -> Checkpoint:
    found = _cached(folder)
    if not found:
        raise Refused(f"the hub cache folder {folder} holds no open_clip checkpoint ({OPEN_CLIP_NAMES[0]}, "
                      f"{OPEN_CLIP_NAMES[2]}, ...); fetch one into it on a machine with internet "
                      f"({cite('clip-weights')})")
    mine = _of_model(found, model)
    if not mine:
        raise Refused(f"the hub cache folder {folder} holds open_clip weights of "
                      f"{', '.join(str(c.repo) for c in found)} but none of {model}'s (from "
                      f"{', '.join(sorted(hub_files(model)))}); fetch one, or set quality.clip.model "
                      "(scaffold: --clip-model) to the cached architecture")
    if len(mine) > 1:
        raise Refused(f"the hub cache folder {folder} holds several open_clip checkpoints; name one in "
                      "quality.clip.weights (scaffold: --clip-weights FILE): " + "; ".join(str(c.path) for c in mine))
    return mine[0]


def locate(path: Path, model: str | None = None) -> Checkpoint:
    """The checkpoint `path` names: the file itself, the one in a folder, or the one in a hub cache folder."""
    if path.is_file():
        if path.suffix not in SUFFIXES:
            raise Refused(f"{path} is not a checkpoint file: name one open_clip loads "
                          f"({', '.join('*' + s for s in SUFFIXES)})")
        config = path.parent / CONFIG_NAME
        return Checkpoint(path, config if config.is_file() else None, _repo_of(path))
    if not path.is_dir():
        raise Refused(f"{path} does not exist: name an existing checkpoint file or folder (quality.clip.weights; "
                      "scaffold: --clip-weights PATH)")
    if is_hub_cache(path):
        return _from_cache(path, model)
    found = _from_folder(path, model, strict=False)
    if found is None:
        raise Refused(f"the folder {path} holds no checkpoint file ({', '.join('*' + s for s in SUFFIXES)}); it holds "
                      f"{_listing(path)}; put the checkpoint there, or name the file itself")
    return found


def common_places(root: Path) -> list[Path]:
    """Where CLIP weights are usually found on a machine: the project's weights/ folder, the Hugging Face hub cache
    (HF_HUB_CACHE, HF_HOME, else ~/.cache/huggingface/hub) and open_clip's download folder ~/.cache/clip."""
    from huggingface_hub import constants

    places = [root / "weights", Path(constants.HF_HUB_CACHE), Path.home() / ".cache" / "clip"]
    return list(dict.fromkeys(p.expanduser() for p in places))


def search(places: list[Path], model: str | None) -> list[Checkpoint]:
    """Checkpoints open_clip would load for `model` (any open_clip checkpoint when None) in `places`: hub caches,
    and plain folders holding open_clip's own names or `model`'s download name; never a guess among other files."""
    found: list[Checkpoint] = []
    for place in places:
        if not place.is_dir():
            continue
        if is_hub_cache(place):
            found += _of_model(_cached(place), model)
            continue
        hit = _from_folder(place, model, strict=True)
        if hit is not None:
            found.append(hit)
    return found


def unreadable(checkpoint: Checkpoint) -> str | None:
    """The fix when this process cannot read the checkpoint (or its config); the task metrics run in the harness
    itself, as the user who runs dit-ar, not in the sandboxed workers."""
    for path in filter(None, (checkpoint.path, checkpoint.config)):
        if not os.access(path, os.R_OK):
            real = path.resolve()
            mode = real.stat().st_mode & 0o777
            return (f"the CLIP file {real} (mode {mode:04o}, owner uid {real.stat().st_uid}) is not readable by this "
                    f"user (uid {os.geteuid()}), who computes the CLIP scores; fix: `chmod a+r {real}`")
    return None
