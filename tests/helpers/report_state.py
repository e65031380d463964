"""A hand-built state directory for the report tests (unit: the HTML; e2e: the page in Chromium)."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dit_ar_contract.status import Status
from pytest_dit_ar.state import ledger
from pytest_dit_ar.state.files import write_json_atomic
from pytest_dit_ar.state.ledger import LedgerRow
from pytest_dit_ar.state.paths import StatePaths

PROJECT = Path(__file__).resolve().parents[2]
CASES = ["digit-0", "digit-1"]  # two rows of case images show the grid as well as five: each one costs a render
NASTY = '<script>alert("x")</script> & co'
FOREIGN = "dit-xl2-256@nvidia-h200"


def _png(path: Path, seed: int, size: int = 32) -> None:
    """A small random-ish RGB picture (a blurred digit stand-in)."""
    rng = np.random.default_rng(seed)
    arr = (rng.random((size // 4, size // 4, 3)) * 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).resize((size, size), Image.BILINEAR).save(path)


def _row(run_id: str, status: str, candidate: float | None, best_before: float | None, description: str,
         lane: str = "embedded-cpu", p: float | None = None) -> LedgerRow:
    """A ledger row with every column."""
    gain = None if candidate is None or best_before is None else (1 - candidate / best_before) * 100
    return LedgerRow(timestamp="2025-01-01T00:00:00+0000", run_id=run_id, lane=lane, commit=f"{run_id:0<40}"[:40],
                     parent="b" * 40, status=Status.from_word(status),
                     declared_class="" if status == "baseline" else "exact", effective_class="exact",
                     metric="latency_ms", best_before=best_before, candidate=candidate, improvement_pct=gain,
                     p_value=p, peak_vram_mb=512.0, quality_summary="class=exact", description=description,
                     run_dir=f".autoresearch/runs/{run_id}")


def _block(index: int, cand_ms: float, best_ms: float, n: int = 10) -> dict:
    """A perf.json block with samples and stats."""
    rng = np.random.default_rng(index)
    cand = list(cand_ms / 1e3 * (1 + 0.03 * rng.standard_normal(n)))
    best = list(best_ms / 1e3 * (1 + 0.03 * rng.standard_normal(n)))
    ratio = cand_ms / best_ms
    stats = {"rounds": n, "best_median_ms": best_ms, "cand_median_ms": cand_ms, "best_p95_ms": best_ms * 1.05,
             "cand_p95_ms": cand_ms * 1.05, "median_ratio": ratio, "ci_upper_ratio": ratio + 0.01,
             "ci_lower_ratio": ratio - 0.01, "improvement_pct": (1 - ratio) * 100,
             "p_value": 0.001, "mwu_p_value": 0.002, "significant": True, "passes": True}
    return {"index": index, "cand_s": cand, "best_s": best, "seeds": [], "orders": [], "divergence": 0.01,
            "warmup_s": {"cand": [0.5], "best": [0.5]}, "build_s": {"cand": 1.0, "best": 1.0}, "problems": [],
            "memory": {"cand": {"peak_rss_mb": 500.0}, "best": {"peak_rss_mb": 510.0}}, "stats": stats}


def _quality(psnr: dict[str, float], failures: list[str]) -> dict:
    """A quality.json with per-case fidelity."""
    per_case = {cid: {"fidelity": {"psnr_db": v, "ssim": 0.99, "latent_rel_l2": 1e-3, "latent_max_abs": 1e-2},
                      "task_pass": True, "checks": [{"name": "psnr_db", "passed": v > 20, "value": v, "threshold": 20.0,
                                                     "case": cid, "message": ""}]}
                for cid, v in psnr.items()}
    return {"declared_class": "exact", "effective_class": "exact", "audit_reasons": [], "summary": {},
            "task_candidate": {}, "task_baseline": {}, "aggregate": [], "per_case": per_case, "failures": failures}


@pytest.fixture
def state(tmp_path: Path) -> tuple[Path, list[LedgerRow]]:
    """A repo folder with a config, a session, a baseline, a profile and one run of every status."""
    root = tmp_path / "repo"
    (root / "config").mkdir(parents=True)
    shutil.copy(PROJECT / "config" / "autoresearch.json", root / "config" / "autoresearch.json")
    paths = StatePaths(root)
    write_json_atomic(paths.session, {"tag": "t1", "branch": "autoresearch/t1", "lane": "embedded-cpu",
                                      "lane_id": "embedded-cpu", "on_target": True,
                                      "device": {"kind": "cpu", "name": "Fake CPU <x86>"}})
    base = paths.baseline("embedded-cpu")
    for i, cid in enumerate(CASES):
        _png(base / "cases" / f"{cid}.png", i)
    summary = {"commit": "a" * 40, "task_metrics": {"judge_accuracy": 0.95, "frechet_distance": 0.4},
               "envelope": {"psnr_db": float("inf"), "ssim": 1.0, "latent_rel_l2": 0.0},
               "timing": {"median_ms": 200.0, "p95_ms": 210.0, "noise_floor_pct": 0.8, "noise_ci_ratio": [0.99, 1.01],
                          "aa_block": _block(0, 200, 200)}}
    write_json_atomic(base / "baseline.json", summary)
    write_json_atomic(paths.run("r0-baseline") / "baseline.json", summary)  # the baseline keeps a copy in its run
    foreign = {"environment": {"device": {"kind": "cuda", "name": "NVIDIA H200"}}, "timing": {"median_ms": 90.0}}
    write_json_atomic(paths.baseline(FOREIGN) / "baseline.json", foreign)
    write_json_atomic(paths.best, {"embedded-cpu": {"commit": "k1" + "0" * 38, "run_id": "r2-keep",
                                                    "measurements": {"median_ms": 150.0}}})
    rows = [
        _row("r0-baseline", "baseline", 200.0, None, "baseline"),
        _row("r1-perf", "discard-performance", 199.0, 200.0, "slightly faster attention (not significant)", p=0.3),
        _row("r2-keep", "keep", 150.0, 200.0, NASTY, p=0.001),
        _row("r3-quality", "discard-quality", 120.0, 150.0, "bf16 everywhere"),
        _row("r4-crash", "crash", None, 150.0, "torch.compile max-autotune"),
        _row("r5-scope", "discard-scope", None, 150.0, "edited the harness"),
        _row("r6-revalidate", "revalidate", 150.0, 200.0, "re-validation of the best against the original baseline"),
        _row("f0-baseline", "baseline", 90.0, None, "baseline", lane=FOREIGN),
    ]
    rows[-1] = dataclasses.replace(rows[-1], run_dir="")
    for row in rows:
        ledger.append(paths.ledger, row)
    write_json_atomic(paths.run("r6-revalidate") / "revalidate.json", {  # what loop/revalidate.py writes
        "run_id": "r6-revalidate", "best_commit": "r2-keep".ljust(40, "0"), "baseline_commit": "b" * 40,
        "segments": 2, "rounds": 12, "steps": [{}],
        "measured": {"estimate_pct": 3.0, "lower_pct": 1.0, "upper_pct": 5.0},
        "product": {"estimate_pct": 25.0, "lower_pct": 20.0, "upper_pct": 30.0},
        "holdout": {"headline": "holdout: passes 10/10 cases under the exact gate"},
        "warning": "WARNING: the chain re-validated at +3.00% but its steps claim +25.00%"})
    keep = paths.run("r2-keep")
    write_json_atomic(keep / "experiment.json", {"reasons": ["block 1: candidate 150 ms vs best 200 ms"]})
    write_json_atomic(keep / "perf.json", {"keep": True, "reasons": ["improved"], "blocks": [_block(0, 150, 200),
                                                                                          _block(1, 151, 199)]})
    write_json_atomic(keep / "quality.json", _quality({c: 60.0 + i for i, c in enumerate(CASES)}, []))
    for i, cid in enumerate(CASES):
        _png(keep / "cases" / f"{cid}.png", i)
    write_json_atomic(paths.run("r1-perf") / "perf.json", {"blocks": [_block(0, 199, 200)], "reasons": ["p=0.3"]})
    write_json_atomic(paths.run("r1-perf") / "quality.json", _quality({c: float("inf") for c in CASES}, []))
    write_json_atomic(paths.run("r3-quality") / "quality.json",
                      _quality({c: 12.0 + i for i, c in enumerate(CASES)}, ["psnr_db case digit-0: 12 (needs >= 20)"]))
    (paths.run("r4-crash")).mkdir(parents=True)
    (paths.run("r4-crash") / "crash.txt").write_text("CUDA out of memory <oops>\n\ntraceback ...\n")
    write_json_atomic(paths.run("profile-20250101-000000") / "profile.json", {  # as `dit-ar profile` writes it
        "lane": "embedded-cpu", "lane_id": "embedded-cpu", "device": "Fake CPU", "commit": "k1" * 5,
        "summary": {"batch": 8, "steps": 20, "total_ms": 160.0, "stage_basis": "host_ms", "denoise_per_step_ms": 6.5,
                    "stage_ms": {"text_encode": 2.0, "denoise": 130.0, "decode": 15.5, "unattributed": 12.5},
                    "top_ops": [{"name": "aten::addmm <gemm>", "self_ms": 80.0, "calls": 400}]}})
    write_json_atomic(paths.run("profile-20250101-000001") / "profile.json",
                      {"lane_id": FOREIGN, "summary": {"stage_ms": {"denoise": 1.0}}})  # shown under its own lane
    return root, rows


def _images(page: Path) -> list[Path]:
    """The files the page's img tags point to (relative to the page)."""
    html = page.read_text(encoding="utf-8")
    srcs = re.findall(r'<img src="([^"]+)"', html)
    assert all(not s.startswith(("/", "file:")) for s in srcs), srcs
    return [page.parent / s for s in srcs]


def _assert_valid_pngs(files: list[Path]) -> None:
    """Every file exists and is a PNG of a plausible size."""
    for f in files:
        assert f.is_file(), f
        with Image.open(f) as im:
            im.verify()
            assert im.format == "PNG" and im.size[0] > 50 and im.size[1] > 50, f
