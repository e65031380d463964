#!/usr/bin/env bash
# What ran on the 2-GPU H200 machine for docs/perf-harness.md, docs/results-h200.md and docs/models.md.
#   bash docs/device/h200_run.sh [tests] [session] [study]     (default: all three)
# tests   (GPU 1): full-size presets and GPU determinism (pytest -m cuda)
# session (GPU 1, after tests): the research session of examples/h200-session on dit-xl2-256
# study   (GPU 0, in parallel): the harness study (false keeps on no-op commits, detection of speedups)
# Each side's workers are pinned to their own two cores. Results land in $OUT.
# Needs the wheels in .whl/ (diffusers, gitpython, gitdb, smmap, importlib_metadata; git.deb if the
# machine has no git). Knobs: NULLS (20), TRIALS (4), STEPS (session sampling steps, 8), ROUNDS (8).
set -u
parts="${*:-tests session study}"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$PWD" PYTEST_PLUGINS=pytest_dit_ar.plugin PYTHONUNBUFFERED=1
if ! command -v git >/dev/null; then
  dpkg -x .whl/git.deb /tmp/gitroot
  export PATH="/tmp/gitroot/usr/bin:$PATH" GIT_EXEC_PATH=/tmp/gitroot/usr/lib/git-core
fi
{ nvidia-smi; git --version; nproc; python3 -c "import torch, diffusers; print(torch.__version__, diffusers.__version__)"; } > "$OUT/env.txt" 2>&1
has() { case " $parts " in *" $1 "*) return 0;; esac; return 1; }

(
  export CUDA_VISIBLE_DEVICES=1
  if has tests; then
    timeout 200 python3 -m pytest tests/test_presets.py tests/test_gpu_determinism.py -m cuda -s -q -p no:cacheprovider \
      > "$OUT/gpu_tests.txt" 2>&1
  fi
  if has session; then
    timeout "${SESSION_S:-560}" bash examples/h200-session/replay.sh /tmp/h200 "${STEPS:-8}" "${ROUNDS:-8}" 8,9 \
      > "$OUT/session.txt" 2>&1
    cp /tmp/h200/project/.autoresearch/results.tsv "$OUT/session_ledger.tsv" 2>/dev/null
    cp /tmp/h200/profile-baseline.json "$OUT/profile.json" 2>/dev/null
    (cd /tmp/h200/project/.autoresearch && tar czf "$OUT/session_state.tgz" --exclude=worktrees --exclude='*.safetensors' .) 2>/dev/null
  fi
) &
(
  export CUDA_VISIBLE_DEVICES=0
  if has study; then
    timeout "${STUDY_S:-560}" python3 -m perf_suite.study --lane dit-xl2-256 --nulls "${NULLS:-20}" --speedups 10,5,2 \
      --trials "${TRIALS:-4}" --steps 4 --rounds 10 --pool 6 --cpu-affinity 4,5 --out "$OUT/study.json" > "$OUT/study.txt" 2>&1
  fi
) &
wait
echo done
