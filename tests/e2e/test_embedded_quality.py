"""The embedded baseline's task quality as the digit judge sees it: the lane's own workload on its frozen corpus.

A property of the shipped assets (weights, corpus, judge), not of the harness's code: it generates all 40 cases,
so it runs with the end-to-end tier (about half a minute of CPU), not the unit tier."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from dit_ar_contract.config import load_config
from quality_suite import judge as J

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "quality_suite" / "corpus" / "embedded_digits.jsonl"


def test_embedded_baseline_generations_are_recognised() -> None:
    judge = J.load_judge()
    sys.path.insert(0, str(ROOT))
    import model_under_test

    cases = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    assert len(cases) >= 40 and {c["label"] for c in cases} == set(range(10))
    # the embedded lane's own workload (its steps and guidance are what a baseline generates), every case in one call
    # (each request's noise comes from its own seed; one call of 40 is cheaper on the CPU than five of 8)
    spec = dict(load_config(ROOT / "config" / "autoresearch.json").lanes["embedded-cpu"].workload(ROOT),
                batch=len(cases))
    pipe = model_under_test.build_pipeline(spec)
    images = pipe.generate([(c["prompt"], c["seed"]) for c in cases]).images
    labels = torch.tensor([c["label"] for c in cases])
    pred = judge.predict(images)
    acc = (pred == labels).float().mean().item()
    mean, cov = J.load_real_stats()
    fd = J.frechet_distance(mean, cov, *J.feature_stats(judge.features(images)))
    wrong = [(c["id"], int(p)) for c, p in zip(cases, pred) if int(p) != c["label"]]
    print(f"\nembedded baseline: judge accuracy {acc:.3f} on {len(cases)} cases, Frechet distance {fd:.2f}; "
          f"misclassified: {wrong}")
    assert acc >= 0.90, wrong
