"""The embedded model is bitwise deterministic across processes (two run side by side)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


SPEC = {
    "root": str(ROOT), "lane": "embedded-cpu", "preset": "embedded-digits",
    "weights": str(ROOT / "assets" / "embedded-digits"),
    "device": "cpu", "resolution": 32, "steps": 8, "guidance": 3.0, "batch": 4, "options": {},
}
BATCH = [("a handwritten digit seven", 11), ("3", 12), ("nine", 13), ("the digit 0", 14)]


_CHILD = r"""
import hashlib, json, sys, torch
torch.set_num_threads(2)
sys.path.insert(0, sys.argv[1])
import model_under_test
spec = json.loads(sys.argv[2])
out = model_under_test.build_pipeline(spec).generate([tuple(r) for r in json.loads(sys.argv[3])])
print(json.dumps({"images": hashlib.sha256(out.images.contiguous().numpy().tobytes()).hexdigest(),
                  "latents": hashlib.sha256(out.latents.contiguous().numpy().tobytes()).hexdigest()}))
"""


@pytest.mark.extended  # CI's 15-minute budget; the full end-to-end tier runs it
def test_bitwise_identical_across_processes():
    requests = json.dumps(BATCH)
    env = dict(os.environ, OMP_NUM_THREADS="2")
    args = [sys.executable, "-c", _CHILD, str(ROOT), json.dumps(SPEC), requests]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT))
             for _ in range(2)]  # two separate processes, run side by side
    digests = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-2000:]
        digests.append(json.loads(out.strip().splitlines()[-1]))
    assert digests[0] == digests[1]


