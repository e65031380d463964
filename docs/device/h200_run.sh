#!/usr/bin/env bash
# What ran on the 2-GPU H200 machine for docs/perf-harness.md, docs/results-h200.md and docs/models.md.
# GPU 0: the harness study (false keeps, detection rates). GPU 1: full-size presets, GPU determinism,
# then the research session of examples/h200-session. Results land in $OUT.
# Needs the wheels in .whl/ (diffusers, gitpython, gitdb, smmap, importlib_metadata; git.deb if the
# machine has no git). Usage: bash docs/device/h200_run.sh [STUDY_NULLS] [STUDY_TRIALS] [SESSION_STEPS]
set -u
nulls="${1:-20}"; trials="${2:-4}"; steps="${3:-10}"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$PWD" PYTEST_PLUGINS=pytest_dit_ar.plugin PYTHONUNBUFFERED=1
if ! command -v git >/dev/null; then
  dpkg -x .whl/git.deb /tmp/gitroot
  export PATH="/tmp/gitroot/usr/bin:$PATH" GIT_EXEC_PATH=/tmp/gitroot/usr/lib/git-core
fi
{ nvidia-smi; git --version; python3 -c "import torch, diffusers; print(torch.__version__, diffusers.__version__)"; } > "$OUT/env.txt" 2>&1

(
  export CUDA_VISIBLE_DEVICES=1
  timeout 200 python3 -m pytest tests/test_presets.py tests/test_gpu_determinism.py -m cuda -s -q -p no:cacheprovider \
    > "$OUT/gpu_tests.txt" 2>&1
  timeout 380 bash examples/h200-session/replay.sh /tmp/h200 "$steps" 10 > "$OUT/session.txt" 2>&1
  cp /tmp/h200/project/.autoresearch/results.tsv "$OUT/session_ledger.tsv" 2>/dev/null
  cp /tmp/h200/profile-baseline.json "$OUT/profile.json" 2>/dev/null
  (cd /tmp/h200/project/.autoresearch && tar czf "$OUT/session_state.tgz" --exclude=worktrees --exclude='*.safetensors' . ) 2>/dev/null
) &
(
  export CUDA_VISIBLE_DEVICES=0
  timeout 560 python3 -m perf_suite.study --lane dit-xl2-256 --nulls "$nulls" --speedups 2,5,10 --trials "$trials" \
    --steps 4 --rounds 10 --pool 6 --out "$OUT/study.json" > "$OUT/study.txt" 2>&1
) &
wait
echo done
