"""Device peaks (arithmetic and memory) and the roofline arithmetic built on them (docs/design/speed-verdict.md).

A device named in TABLE gets its figure from there; any other device (every CPU included) gets a
*measured* peak: a large matrix product timed in the lane's worker (see perf_suite.profiling).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dit_ar_contract.classes import ChangeClass


@dataclass(frozen=True)
class Peak:
    """The fastest a device can do arithmetic (TFLOP/s) and move memory (GB/s), and where that comes from."""

    device: str
    tflops: float
    bandwidth_gbs: float | None
    dtype: str
    source: str
    measured: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# (substring of the device name, lower case) -> peak. Dense figures: a 2:4-sparse rate is not a floor
# that dense inference can reach.
TABLE: dict[str, Peak] = {
    "a5500": Peak("NVIDIA RTX A5500", 136.0, 768.0, "bf16/fp16 dense tensor",
                  "NVIDIA RTX A5500 datasheet: 272 TFLOP/s bf16/fp16 tensor with sparsity = 136 dense; 768 GB/s GDDR6"),
    "h200": Peak("NVIDIA H200", 790.0, 4800.0, "bf16 dense tensor",
                 "measured on this workplace's H200: 8192^3 bf16 matmul 769-798 TFLOP/s on random data "
                 "(.library/device/KINDS.md, 2026-11-04; datasheet ~990 dense); 4.8 TB/s HBM3e datasheet"),
}


def lookup(device_name: str) -> Peak | None:
    """The table's peak for a device name (None for devices not in the table, and for CPUs)."""
    name = device_name.lower()
    return next((peak for key, peak in TABLE.items() if key in name), None)


def measured_peak(device_name: str, reply: dict[str, Any]) -> Peak:
    """A Peak from the worker's `peak` op reply (a timed matrix product and a timed copy)."""
    what = f"measured: {reply['n']}^3 {reply['dtype']} matmul, best of {reply['reps']} on {reply['threads']} threads"
    return Peak(device_name, float(reply["tflops"]), reply.get("bandwidth_gbs"), reply["dtype"], what, measured=True)


def achieved_tflops(flops: float, seconds: float) -> float:
    return flops / seconds / 1e12 if seconds > 0 else 0.0


def percent_of_peak(flops: float, seconds: float, peak_tflops: float) -> float:
    """Achieved arithmetic rate as a percentage of the device's peak."""
    return 100.0 * achieved_tflops(flops, seconds) / peak_tflops if peak_tflops > 0 else 0.0


def roofline_ms(flops: float, peak_tflops: float) -> float:
    """The fastest `flops` can run at `peak_tflops`, in milliseconds."""
    return flops / (peak_tflops * 1e12) * 1e3


MEASURED_SLACK = 4.0  # a measured peak is no ceiling: load at measurement time, faster dtypes (bf16/AMX on CPUs)
LOW_PRECISION_RATE = 2.0  # int8 (Ampere) and fp8 (Hopper) tensor rates are twice the bf16 dense rate


def floor_ms(flops_per_batch: float | None, peak_tflops: float | None, peak_measured: bool = False,
             base_rows_per_image: float | None = None, cand_rows_per_image: float | None = None,
             effective_class: str | None = None) -> float | None:
    """The verdict's roofline floor from the *baseline's* FLOP count and device peak (never the candidate's).

    Biased low, because a false flag discards a real improvement: a candidate that evaluates the
    denoiser on fewer rows per image (fewer steps, no CFG: approximate) does less work, so the floor
    shrinks by that ratio (it never grows); a quantized candidate may run at the int8/fp8 rate; a
    measured peak gets MEASURED_SLACK.
    """
    if not flops_per_batch or not peak_tflops:
        return None
    scale = 1.0
    if cand_rows_per_image is not None and base_rows_per_image:
        scale = min(1.0, max(0.0, cand_rows_per_image / base_rows_per_image))
    if effective_class == ChangeClass.QUANTIZATION:
        peak_tflops *= LOW_PRECISION_RATE
    if peak_measured:
        peak_tflops *= MEASURED_SLACK
    return roofline_ms(flops_per_batch * scale, peak_tflops)
