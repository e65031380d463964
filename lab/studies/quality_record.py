"""Record per-case task scores on the embedded CPU lane for the quality simulation (lab/studies/quality_simulation.py).

    python -m lab.studies.quality_record --blocks 20 --out lab/data/cpu/quality/pool.npz

The pool is `--blocks` blocks, each the lane's 40-case corpus under its own derived seeds
(quality_suite.corpora.replicas, keyed by a fixed study key). In this process (no worker: the lab measures the
model itself, as the gate would see it) it generates:

* `base`: the lane's pipeline as configured (the baseline);
* `rerun`: the same pool in reversed batches (a benign, exact rerun) and `8bit`: `base` rounded to 8 bits (the two
  harmless changes the product's resolution is measured from);
* `int8`: the demo's dynamic int8 quantization of every Linear; `half`: half the sampling steps (the demo's
  approximate change);
* `blend-<metric>-<class>-<k>`: `base` blended with another case's image (quality_suite.calibration.blend) with
  the weight that makes the metric's degradation, averaged over the blocks, k times its margin (approximate) or its
  resolution (quantization), k in 0.5, 1, 2, 5; only that metric's scores are kept.

Per case it keeps the judge's probability of the labelled digit (`judge_accuracy`) and the judge's 64 features
(`frechet_distance`, float32). The margins, the resolution (median over blocks of what the harmless changes do,
times the exact envelope multiple, as the product measures it at baseline), the weights and the command go into
the file's `meta` entry (JSON).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from dit_ar_contract.classes import ChangeClass
from dit_ar_contract.config import load_config
from quality_suite import calibration, task_metrics, task_tests
from quality_suite.case_scores import CaseScores
from quality_suite.corpora import Case, load_corpus, replicas

ROOT = Path(__file__).resolve().parents[2]
KEY = "quality-study"
METRICS = ("judge_accuracy", "frechet_distance")
SIZES = (0.5, 1.0, 2.0, 5.0)


def generate(pipe, cases: list[Case], batch: int) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for i in range(0, len(cases), batch):
        group = cases[i:i + batch]
        images = pipe.generate([c.keyed_request(KEY) for c in group]).images
        out.update({c.id: img.clone() for c, img in zip(group, images)})
    return out


def scores(images: dict[str, torch.Tensor], cases: list[Case], quality, names=METRICS) -> CaseScores:
    return CaseScores.of(task_metrics.compute(list(names), images, cases, ROOT, quality))


def variants(blocks: int, threads: int) -> tuple[list[Case], dict[str, dict[str, torch.Tensor]], dict]:
    sys.path.insert(0, str(ROOT))
    import model_under_test

    torch.set_num_threads(threads)
    lane = load_config(ROOT / "config" / "autoresearch.json").lanes["embedded-cpu"]
    corpus = load_corpus(ROOT / lane.corpus)
    cases = replicas(corpus, blocks * len(corpus))
    spec = dict(lane.workload(ROOT))
    pipe = model_under_test.build_pipeline(spec)
    t = time.perf_counter()
    out = {"base": generate(pipe, cases, lane.batch)}
    rerun = generate(pipe, list(reversed(cases)), lane.batch)
    out["rerun"] = {c.id: rerun[c.id] for c in cases}
    out["8bit"] = {cid: (img.clamp(0, 1) * 255).round() / 255 for cid, img in out["base"].items()}
    int8 = model_under_test.build_pipeline(spec)
    int8.transformer = torch.ao.quantization.quantize_dynamic(int8.transformer.float(), {torch.nn.Linear},
                                                              dtype=torch.qint8)
    out["int8"] = generate(int8, cases, lane.batch)
    out["half"] = generate(model_under_test.build_pipeline(dict(spec, steps=spec["steps"] // 2)), cases, lane.batch)
    return cases, out, {"generation_s": round(time.perf_counter() - t, 1), "lane": lane, "corpus": len(corpus)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "lab" / "data" / "cpu" / "quality" / "pool.npz")
    args = ap.parse_args(argv)
    cases, images, info = variants(args.blocks, args.threads)
    lane = info.pop("lane")
    quality = lane.quality
    ids = [c.id for c in cases]
    blocks = [ids[i:i + info["corpus"]] for i in range(0, len(ids), info["corpus"])]
    scored = {name: scores(imgs, cases, quality) for name, imgs in images.items()}
    base = scored["base"]
    task_base = {m: float(np.mean([_value(m, base.select(b)) for b in blocks])) for m in METRICS}
    per_block = [task_tests.resolution(base.select(b), [scored["rerun"].select(b), scored["8bit"].select(b)],
                                       task_base, quality.exact.envelope_multiple) for b in blocks]
    resolution = {m: float(np.median([r[m] for r in per_block])) for m in METRICS}
    weights: dict[str, float] = {}
    for m in METRICS:
        for cls in (ChangeClass.APPROXIMATE, ChangeClass.QUANTIZATION):
            margin, _ = task_tests.margins(cls, quality, task_base, resolution)[m]
            for k in SIZES:
                def degraded(w: float, m: str = m) -> float:
                    blended = scores(calibration.blend(images["base"], cases, w), cases, quality, (m,))
                    return calibration.block_degradation(m, base, blended, blocks)

                w = calibration.weight_for(degraded, k * margin)
                name = f"blend-{m}-{cls.word}-{k:g}"
                weights[name] = w
                scored[name] = scores(calibration.blend(images["base"], cases, w), cases, quality, (m,))
                print(f"{name}: weight {w:.5g}, degradation {degraded(w):+.4g} (target {k * margin:+.4g})",
                      flush=True)
    arrays = {"ids": np.array(ids), "labels": np.array([c.label for c in cases])}
    for name, s in scored.items():
        for m in s.rows:
            dtype = np.float32 if m == "frechet_distance" else np.float64
            arrays[f"{name}|{m}"] = np.stack([s.rows[m][cid] for cid in ids]).astype(dtype)
    meta = {**info, "blocks": args.blocks, "key": KEY, "task_base": task_base, "resolution": resolution,
            "resolution_per_block": per_block, "weights": weights,
            "approximate_margin": dict(quality.approximate.task_margin),
            "command": "python -m lab.studies.quality_record " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": f"{platform.node()} {platform.processor() or platform.machine()}, torch {torch.__version__}",
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")}
    arrays["meta"] = np.array(json.dumps(meta))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **arrays)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB): {len(ids)} cases, {len(scored)} variants; "
          f"resolution {resolution}; corpus-size scores {task_base}")
    return 0


def _value(metric: str, s: CaseScores) -> float:
    """The metric's value over one block (a mean of per-case scores, or the set statistic)."""
    rows = np.stack(list(s.rows[metric].values()))
    stat = task_metrics.metric(metric).statistic
    return float(stat(rows)[0]) if stat is not None else float(rows.mean())


if __name__ == "__main__":
    raise SystemExit(main())
