"""What the harness may keep alive at once on the target's memory (a pure module; loop.speed.measurement applies it).

The target card (an RTX A5500, `target.vram_gb` = 24) holds both sides of a timing pair only when their peaks
fit together: PixArt-Sigma-1024's baseline alone reserves 18.8 GB. The budget is for the SUM of the workers
alive at the same time (a frozen worker keeps its memory), not per process. On a larger card a lane can emulate
the target with `guardrails.emulated_vram_gb`, so the H200 judges as an A5500 would.

Per segment the plan is one of:
* `pair`: both workers alive, rounds interleaved (the paired protocol);
* `alternate`: one worker at a time, in fresh processes: the first side's worker warms up and runs the
  segment's requests, exits, then the other side's worker runs the same requests; the order of the sides
  alternates from segment to segment (docs/design/speed-verdict.md, "One side at a time", says what this costs);
* `refuse`: a single worker (the best's, or the baseline's) does not fit the budget: nothing can be judged.
A candidate whose own peak exceeds the budget is not refused: the memory guardrail discards it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dit_ar_contract.sides import Role

HEADROOM_PCT = 5.0  # kept free: NVML samples miss short peaks; the allocator's fragmentation


@dataclass(frozen=True)
class MemoryBudget:
    """The device memory all live workers together may use, and where the figure comes from."""

    mb: float | None  # None: not limited (CPU lanes, or a foreign GPU without an emulated size)
    source: str

    @property
    def usable_mb(self) -> float | None:
        return None if self.mb is None else self.mb * (1 - HEADROOM_PCT / 100)


def budget(is_cuda: bool, target_vram_gb: float, on_target: bool, emulated_vram_gb: float | None,
           device_gb: float | None) -> MemoryBudget:
    """The lane's budget: the emulated card when set, else the target's card on the target, else the device."""
    if not is_cuda:
        return MemoryBudget(None, "CPU lane: no device memory budget")
    if emulated_vram_gb:
        return MemoryBudget(emulated_vram_gb * 1024, f"guardrails.emulated_vram_gb = {emulated_vram_gb:g}")
    if on_target:
        return MemoryBudget(target_vram_gb * 1024, f"target.vram_gb = {target_vram_gb:g}")
    if device_gb:
        return MemoryBudget(device_gb * 1024, f"this device's {device_gb:.0f} GB")
    return MemoryBudget(None, "device memory unknown")


@dataclass(frozen=True)
class Layout:
    mode: str  # "pair", "alternate" or "refuse"
    reason: str


def layout(b: MemoryBudget, cand_peak_mb: float | None, best_peak_mb: float | None) -> Layout:
    """How the next segment runs, from the peaks measured so far (an unmeasured candidate counts as the best)."""
    usable = b.usable_mb
    if usable is None:
        return Layout("pair", b.source)
    if best_peak_mb is not None and best_peak_mb > usable:
        return Layout("refuse", f"one worker of the best needs {best_peak_mb:.0f} MB and the budget is "
                                f"{b.mb:.0f} MB ({b.source}, {HEADROOM_PCT:g}% kept free): this lane cannot be "
                                "judged on this card; lower the lane's resolution or batch, or raise the budget")
    if best_peak_mb is None and cand_peak_mb is None:
        return Layout("pair", "no peak measured yet")
    cand = cand_peak_mb if cand_peak_mb is not None else best_peak_mb
    best = best_peak_mb if best_peak_mb is not None else cand_peak_mb
    assert cand is not None and best is not None
    if cand + best <= usable:
        return Layout("pair", f"candidate {cand:.0f} MB + best {best:.0f} MB fit {b.mb:.0f} MB ({b.source})")
    return Layout("alternate", f"candidate {cand:.0f} MB + best {best:.0f} MB exceed {usable:.0f} MB of "
                               f"{b.mb:.0f} MB ({b.source}): one side at a time")


def may_prefetch(b: MemoryBudget, best_peak_mb: float | None) -> bool:
    """Whether the best's worker may boot while the candidate's quality run is alive (both then live at once;
    the candidate is assumed to need what the best needs)."""
    usable = b.usable_mb
    return usable is None or best_peak_mb is None or 2 * best_peak_mb <= usable


def order(segment: int, first: Role) -> tuple[Role, Role]:
    """The sides' order in an alternating segment: `first` on even segments, the other side first on odd ones."""
    return (first, first.other) if segment % 2 == 0 else (first.other, first)
