"""The denoiser's rows, counted in the worker for the audit (quality_suite/audit.py: fewer rows per image than the
baseline's is a cut in sampling steps or passes).

Rows are counted where the model runs them, whatever the call path: at the seam's denoiser
(`components["transformer"]`, through its `__call__`) and, as a fallback, at its entry modules (its children; the
first of each ModuleList or ModuleDict; a compiled wrapper's model and that model's children). A rewrite that
calls the denoiser's `forward` directly, or its blocks in a lean loop of its own, skips the first hook but not
the others. A generate's count is the largest any of them saw: every pass goes through each entry module it uses
once, so the largest count is never below the passes that ran (a module called twice in a pass would count
more, never fewer, and fewer is what the audit reads as a cut). A generate that makes outputs while none of them
fires ran its passes unseen (the replay of a CUDA graph captured earlier).

Each hook adds one integer attribute (`_Count.rows`); the hooks are few (a DiT-XL/2 has 5 entry modules), so
the cost per pass is a few Python calls, the same for both sides.
"""

from __future__ import annotations

from typing import Any


class _Count:
    """Rows one module saw since the last reset (a plain attribute: a compiled model traces the hook and writes
    it back after its graph)."""

    def __init__(self, name: str):
        self.name, self.rows = name, 0

    def hook(self, module: Any, args: tuple, kwargs: dict) -> None:
        first = args[0] if args else next(iter(kwargs.values()), None)
        if hasattr(first, "shape") and len(first.shape) > 0:
            self.rows += int(first.shape[0])


def entry_modules(denoiser: Any) -> list[tuple[str, Any]]:
    """The modules a pass of `denoiser` enters first, by name: its children (of a container, the first element),
    the compiled model behind a `torch.compile` wrapper and that model's children."""
    import torch

    found: list[tuple[str, Any]] = []
    root, prefix = denoiser, ""
    inner = getattr(denoiser, "_orig_mod", None)
    if isinstance(inner, torch.nn.Module):
        found.append(("_orig_mod", inner))
        root, prefix = inner, "_orig_mod."
    for name, child in root.named_children():
        if isinstance(child, (torch.nn.ModuleList, torch.nn.ModuleDict)):
            first = next(iter(child.named_children()), None)
            if first is not None:
                found.append((f"{prefix}{name}.{first[0]}", first[1]))
        else:
            found.append((prefix + name, child))
    return found


class DenoiserRows:
    """Counts the denoiser's rows per generate (`reset` before, `rows` after); `seen_at` names the module that
    counted them (the denoiser itself, or the entry module of a rewritten forward)."""

    def __init__(self, denoiser: Any):
        self.counts = [_Count("")] + [_Count(name) for name, _ in entry_modules(denoiser)]
        modules = [denoiser] + [m for _, m in entry_modules(denoiser)]
        for count, module in zip(self.counts, modules):
            module.register_forward_pre_hook(count.hook, with_kwargs=True)

    def reset(self) -> None:
        for count in self.counts:
            count.rows = 0

    @property
    def rows(self) -> int:
        return max(c.rows for c in self.counts)

    @property
    def seen_at(self) -> str | None:
        """'denoiser' when its own call counted the rows, else the entry module's name (None: nothing seen)."""
        best = max(self.counts, key=lambda c: c.rows)
        if best.rows == 0:
            return None
        return "denoiser" if self.counts[0].rows == best.rows else best.name
