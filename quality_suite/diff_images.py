"""Evidence a person can look at: the worst cases as a PNG grid, and the candidate's images per case.

``runs/<id>/worst_cases.png``: one row per worst case (by latent error), columns baseline | candidate |
amplified |difference| heatmap. ``runs/<id>/cases/<case>.png``: the candidate's image of every case when
images are small, of the worst cases only when they are large.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from .artifacts import to_png

WORST_ROWS = 6
ALL_CASES_MAX_PIXELS = 256 * 256  # store every case's PNG up to this size, else only the worst ones


def worst_cases(fidelity: dict[str, dict[str, float]], k: int = WORST_ROWS) -> list[str]:
    """The k case ids farthest from the baseline by latent relative error (ties: lower PSNR first)."""
    return sorted(fidelity, key=lambda c: (-fidelity[c]["latent_rel_l2"], fidelity[c]["psnr_db"]))[:k]


def _hwc(image: torch.Tensor) -> np.ndarray:
    return image.detach().float().clamp(0, 1).permute(1, 2, 0).cpu().numpy()


def grid(cand: dict[str, torch.Tensor], base: dict[str, torch.Tensor],
         fidelity: dict[str, dict[str, float]], path: Path, rows: list[str] | None = None) -> Path:
    """Write a grid, one row per case (default: the worst cases): baseline | candidate | |difference| heatmap
    (scaled per row)."""
    rows = worst_cases(fidelity) if rows is None else rows
    fig = Figure(figsize=(8.4, 2.5 * max(1, len(rows))))
    axes = fig.subplots(max(1, len(rows)), 3, squeeze=False)
    for r, cid in enumerate(rows):
        b, c = _hwc(base[cid]), _hwc(cand[cid])
        diff = np.abs(c - b).mean(-1) if c.shape == b.shape else np.ones(b.shape[:2])
        peak = float(diff.max())
        f = fidelity[cid]
        panels = [(b, f"{cid}: baseline", None),
                  (c, f"candidate (PSNR {f['psnr_db']:.1f} dB)", None),
                  (diff, f"|diff| max {peak:.3g}, rel L2 {f['latent_rel_l2']:.2g}", "inferno")]
        for ax, (img, title, cmap) in zip(axes[r], panels):
            shown = ax.imshow(img, cmap=cmap, vmin=0, vmax=max(peak, 1e-6) if cmap else None,
                              interpolation="nearest")
            ax.set_title(title, fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
            if cmap:
                fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return path


def case_pngs(cand: dict[str, torch.Tensor], fidelity: dict[str, dict[str, float]], folder: Path) -> list[Path]:
    """Write cases/<id>.png: every case for small images, the worst cases only for large ones."""
    small = all(img.shape[-1] * img.shape[-2] <= ALL_CASES_MAX_PIXELS for img in cand.values())
    ids = list(cand) if small else worst_cases(fidelity)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for cid in ids:
        to_png(cand[cid]).save(folder / f"{cid}.png")
        out.append(folder / f"{cid}.png")
    return out


def write(grid_png: Path, cases_folder: Path, cand: dict[str, torch.Tensor], base: dict[str, torch.Tensor],
          fidelity: dict[str, dict[str, float]]) -> None:
    """Both kinds of evidence for one run: the worst-case grid and the case images (the run folder names them)."""
    grid(cand, base, fidelity, grid_png)
    case_pngs(cand, fidelity, cases_folder)


def case_diffs(cand: dict[str, torch.Tensor], base: dict[str, torch.Tensor], fidelity: dict[str, dict[str, float]],
               case_ids: list[str], folder: Path) -> list[Path]:
    """`folder/<case>.png` for every listed case (the failing ones): baseline | candidate | difference."""
    return [grid(cand, base, fidelity, folder / f"{cid}.png", rows=[cid]) for cid in case_ids
            if cid in cand and cid in base]
