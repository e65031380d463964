"""Every prompt of the ImageNet lanes' corpora (main and holdout) is a class name the DiT presets' label
function accepts (torchvision's ImageNet-1k category list, case-insensitive, first id of a repeated name),
with the label it maps to: a prompt that is not one crashes the baseline on the GPU lanes (the holdout's
'lighthouse' did, H200, 2026-12-02)."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LANES = json.loads((ROOT / "config/autoresearch.json").read_text())["lanes"].values()
CORPORA = sorted({ROOT / lane[key] for lane in LANES for key in ("corpus", "holdout_corpus")
                  if lane.get(key) and "imagenet" in lane[key]})


def imagenet_index() -> dict[str, int]:
    """torchvision's category list read from its source (importing torchvision starts a subprocess)."""
    spec = importlib.util.find_spec("torchvision")
    assert spec is not None and spec.origin is not None
    tree = ast.parse((Path(spec.origin).parent / "models" / "_meta.py").read_text())
    names = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", "") == "_IMAGENET_CATEGORIES" for t in node.targets))
    index: dict[str, int] = {}
    for i, name in enumerate(names):
        index.setdefault(name.lower(), i)
    return index


@pytest.mark.parametrize("corpus", CORPORA, ids=lambda p: p.name)
def test_imagenet_prompts_are_class_names_with_their_labels(corpus: Path) -> None:
    index = imagenet_index()
    cases = [json.loads(line) for line in corpus.read_text().splitlines() if line.strip()]
    wrong = [(c["id"], c["prompt"], c.get("label")) for c in cases
             if index.get(c["prompt"].lower()) is None or c.get("label", -1) != index[c["prompt"].lower()]]
    assert cases and not wrong, wrong
