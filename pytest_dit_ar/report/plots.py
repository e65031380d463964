"""PNG figures for `dit-ar report` (matplotlib's object API, Agg backend, no pyplot global state)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from PIL import Image

from dit_ar_contract.sides import Role
from dit_ar_contract.status import Status

from ..state.perf_record import SegmentRecord

STATUS_COLOURS = {s.word: s.colour for s in Status}

DPI = 100


@dataclass(frozen=True)
class Point:
    """One ledger row on the progress plot: experiment number, status and primary metric (None if absent)."""

    x: int
    status: str
    value: float | None


def _save(fig: Figure, path: Path) -> Path:
    """Write the figure as a PNG and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fig.get_layout_engine() is None:
        fig.set_layout_engine("tight")  # laid out within the figure at draw: one render, not two as bbox_inches="tight"
    fig.savefig(path, dpi=DPI)
    return path


def progress(points: list[Point], metric: str, title: str, path: Path) -> Path:
    """Primary metric per experiment: best-so-far step line through keeps, discards as faded points.

    Every keep is the new best (the harness judged it better than the best of its time), so the
    step line goes through the baseline and each keep. Rows without a metric (crash, scope) are
    drawn at the best of their time.
    """
    fig = Figure(figsize=(9, 3.8))
    ax = fig.subplots()
    higher_better = metric == "images_per_s"
    kept = [(p.x, p.value) for p in points if p.status in ("baseline", "keep") and p.value is not None]

    def best_at(x: int) -> float:
        """The best-so-far value at experiment x (the first kept value before any keep)."""
        return next((v for kx, v in reversed(kept) if kx <= x), kept[0][1] if kept else 0.0)

    if kept:
        xs, ys = [x for x, _ in kept], [v for _, v in kept]
        ax.step(xs + [max(p.x for p in points)], ys + [ys[-1]], where="post", color=Status.KEEP.colour,
                lw=2, label="best so far", zorder=2)
    base = next((p for p in points if p.status == "baseline" and p.value is not None), None)
    if base is not None:
        ax.axhline(base.value, color=STATUS_COLOURS["baseline"], ls=":", lw=1)
        ax.plot([base.x], [base.value], marker="*", ms=16, color=STATUS_COLOURS["baseline"], ls="",
                label=f"baseline {base.value:.4g}", zorder=4)
    for status, colour in STATUS_COLOURS.items():
        mine = [p for p in points if p.status == status]
        if status == "baseline" or not mine:
            continue
        ys_mine = [p.value if p.value is not None else best_at(p.x) for p in mine]
        faded = status != "keep"
        ax.scatter([p.x for p in mine], ys_mine, s=45 if faded else 60, color=colour, alpha=0.45 if faded else 1.0,
                   marker="x" if status == "crash" else "o", label=status, zorder=3)
    ax.set_xlabel("experiment number (ledger order; 0 = baseline)")
    ax.set_ylabel(f"{metric} ({'higher' if higher_better else 'lower'} is better)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if points:
        ax.set_xlim(-0.5, max(p.x for p in points) + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    else:
        ax.text(0.5, 0.5, "no ledger rows yet", ha="center", va="center", transform=ax.transAxes)
    return _save(fig, path)


def timing(blocks: list[SegmentRecord], path: Path) -> Path:
    """Candidate vs best round-trip times per segment (or per block, in runs made before segments): a box
    per side with the samples jittered on top."""
    fig = Figure(figsize=(2.2 + 2.4 * max(1, len(blocks)), 3.4))
    ax = fig.subplots()
    rng = np.random.default_rng(0)
    data, positions, colours, labels = [], [], [], []
    for i, block in enumerate(blocks):
        for j, (role, colour) in enumerate(((Role.BEST, "#1f4e9c"), (Role.CANDIDATE, "#d9480f"))):
            ms = [1e3 * v for v in block.times[role]]
            pos = 3 * i + j + 1
            data.append(ms)
            positions.append(pos)
            colours.append(colour)
            labels.append(f"{role.key}\n{'segment' if block.is_segment else 'block'} {block.index + 1}")
            if ms:
                ax.scatter(pos + rng.uniform(-0.15, 0.15, len(ms)), ms, s=14, color=colour, alpha=0.7, zorder=3)
    if any(data):
        boxes = ax.boxplot([d if d else [math.nan] for d in data], positions=positions, widths=0.6,
                           patch_artist=True, showfliers=False)
        for patch, colour in zip(boxes["boxes"], colours):
            patch.set(facecolor=colour, alpha=0.15)
        ax.set_xticks(positions, labels, fontsize=8)
    ax.set_ylabel("round trip per batch (ms)")
    ax.set_title("timed rounds: best vs candidate")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def stages(named_ms: dict[str, float], title: str, path: Path) -> Path:
    """Horizontal bars of time per pipeline stage, largest first, with the share of the total."""
    items = sorted(named_ms.items(), key=lambda kv: kv[1])
    total = sum(v for _, v in items) or 1.0
    fig = Figure(figsize=(8, 0.5 + 0.45 * max(1, len(items))))
    ax = fig.subplots()
    ax.barh([k for k, _ in items], [v for _, v in items], color="#2e8b3d")
    for k, v in items:
        ax.text(v, k, f" {v:.0f} ms ({100 * v / total:.0f}%)" if v >= 1e3 else f" {v:.3g} ms ({100 * v / total:.0f}%)",
                va="center", fontsize=8)
    ax.set_xlabel("ms")
    ax.set_title(title)
    ax.set_xlim(0, max((v for _, v in items), default=1.0) * 1.3)
    return _save(fig, path)


def image_grid(rows: list[tuple[str, Path, Path | None]], path: Path) -> Path:
    """Rows of (label, baseline PNG, candidate PNG or None): baseline | candidate | amplified difference.

    Without any candidate image the baselines are laid out side by side in one row.
    """
    if all(c is None for _, _, c in rows):
        panels = [[(f"{label}: baseline", _load(base)) for label, base, _ in rows]]
    else:
        panels = []
        for label, base_png, cand_png in rows:
            base = _load(base_png)
            cand = _load(cand_png) if cand_png else None
            diff = np.clip(np.abs(cand - base) * 8.0, 0, 1) if cand is not None and cand.shape == base.shape else None
            panels.append([(f"{label}: baseline", base), ("candidate", cand), ("|diff| x8", diff)])
    fig = Figure(figsize=(2.4 * len(panels[0]), 2.5 * len(panels)))
    axes = fig.subplots(len(panels), len(panels[0]), squeeze=False)
    for r, row in enumerate(panels):
        for c, (name, img) in enumerate(row):
            ax = axes[r][c]
            ax.set_xticks([])
            ax.set_yticks([])
            if img is None:
                ax.text(0.5, 0.5, "not stored", ha="center", va="center", transform=ax.transAxes)
            else:
                ax.imshow(img, interpolation="nearest")
            ax.set_title(name, fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def _load(png: Path) -> np.ndarray:
    """An image file as float RGB in [0, 1]."""
    with Image.open(png) as im:
        return np.asarray(im.convert("RGB"), dtype=np.float32) / 255.0
