"""The CLIP score of a scaffolded lane: `dit-ar scaffold ... --clip-weights PATH [--clip-model NAME]`.

PATH is an open_clip checkpoint file, a folder holding one, or a Hugging Face hub cache folder (the one open_clip
writes with `cache_dir=`). The checkpoint is found now, offline, and its architecture resolved, so the scaffold
never writes a lane whose baseline would refuse; the lane then gets `clip_score` as its task metric, its own
`quality.clip` (the checkpoint file itself, so a later download into the cache cannot change the scorer) and a
declared margin for approximate changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dit_ar_contract.config import ClipSettings
from dit_ar_contract.errors import Refused
from dit_ar_contract.guides import cite
from quality_suite import clip, clip_weights
from quality_suite.clip import ClipSpec

# The declared margin of approximate changes: how far the mean CLIP score (0-100) may fall below the baseline's.
# A choice, not a measurement; edit lanes.<lane>.quality.approximate.task_margin.clip_score to change it.
CLIP_MARGIN = 0.5
GUIDE = clip.GUIDE


@dataclass(frozen=True)
class ClipChoice:
    """What the lane's quality.clip says and what it resolves to on this machine now."""

    entry: str  # quality.clip.weights: the checkpoint file, relative inside the repository, else absolute
    model: str | None  # quality.clip.model (None: the open_clip_config.json beside the checkpoint says)
    spec: ClipSpec
    fixed: str | None  # what --clip-weights named, as a fixed path, when it lies inside the repository


def _entry(root: Path, path: Path) -> str:
    """`path` relative to the repository when inside it, else absolute (links kept: a hub snapshot's file)."""
    absolute = Path(os.path.abspath(path.expanduser()))
    return absolute.relative_to(root).as_posix() if root in absolute.parents else str(absolute)


def choose(root: Path, weights: Path, model: str | None, text_to_image: bool, mutable: str) -> ClipChoice:
    """Find the checkpoint `weights` names and its architecture, or refuse saying what to pass instead."""
    if not text_to_image:
        raise Refused("--clip-weights scores images against their prompts, and a class-conditional pipeline has "
                      f"none; use classifier_top1 for ImageNet classes (quality.classifier, {cite('task-metrics')})")
    given = _entry(root, weights)
    if given == mutable.rstrip("/") or given.startswith(mutable):
        raise Refused(f"--clip-weights {weights}: the CLIP weights are inside the mutable {mutable}, where a "
                      "candidate could change them; keep them elsewhere")
    if not (root / given).exists():
        raise Refused(f"--clip-weights {weights}: no such file or folder (an open_clip checkpoint, a folder holding "
                      f"one, or a Hugging Face hub cache folder; {GUIDE} says how to fetch one)")
    try:
        found = clip.spec_for(ClipSettings(model, given), root)
    except Refused as exc:
        raise Refused(f"--clip-weights {weights}: {exc}") from None
    beside = found.weights.with_name(clip_weights.CONFIG_NAME).is_file()
    fixed = None if Path(given).is_absolute() else given + ("/" if (root / given).is_dir() else "")
    return ClipChoice(_entry(root, found.weights), model if beside else found.model, found, fixed)


def apply(config: dict[str, Any], lane: str, choice: ClipChoice) -> None:
    """The lane's task metric, its quality.clip and margin; the weights fixed when they live in the repository."""
    node = config["lanes"][lane]
    node["task_metrics"] = ["clip_score"]
    # model null overrides the top-level quality.clip.model where the checkpoint's own config says it
    node["quality"] = {"clip": {"model": choice.model, "weights": choice.entry},
                       "approximate": {"task_margin": {"clip_score": CLIP_MARGIN}}}
    if choice.fixed and choice.fixed not in config["fixed_paths"]:
        config["fixed_paths"] = [*config["fixed_paths"], choice.fixed]


def describe(choice: ClipChoice | None, lane: str) -> str:
    """The scaffold's line about the lane's task metric."""
    if choice is None:
        return (f"no task metric: approximate and quantization changes cannot be kept on lane {lane}; give the "
                f"CLIP weights with --clip-weights PATH (see {GUIDE})")
    return (f"task metric clip_score: open_clip {choice.spec.model} from {choice.entry}; an approximate change may "
            f"lower its mean by at most {CLIP_MARGIN:g} (lanes.{lane}.quality.approximate.task_margin.clip_score)")


def add_clip(config: dict[str, Any], lane: str, weights: Path | None, model: str | None, root: Path,
             text_to_image: bool, mutable: str) -> ClipChoice | None:
    """The lane's CLIP score when --clip-weights names weights (None: the lane keeps no task metric)."""
    if weights is None:
        return None
    choice = choose(root, weights, model, text_to_image, mutable)
    apply(config, lane, choice)
    return choice
