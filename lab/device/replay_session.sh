#!/usr/bin/env bash
# The research session of examples/h200-session/ replayed on a GPU machine, with the GPU preset tests and the
# harness study beside it: what ran on the H200 machines for docs/design/speed-verdict.md, lab/notebook/h200-research-sessions.md and docs/design/models-and-lanes.md.
#   bash lab/device/replay_session.sh [tests] [session] [study] [branches]   (default: the first three)
# tests   (last GPU): full-size presets and GPU determinism (pytest -m cuda)
# session (last GPU, after tests): the research session of examples/h200-session on dit-xl2-256.
#         Resumable across calls: state is restored from .h200state/session.tgz when /tmp/h200 is
#         absent, and saved to $OUT/session*.tgz at the end (copy them to .h200state/ and call again).
#         Known limit: on 2026-11-30 session.tgz and session_git.tgz came to 23 and 20 MB after the
#         baseline and three experiments, over the 16 MiB a returned file may have, so the state did
#         not come back; part 2 of lab/notebook/h200-research-sessions.md ran as branches instead.
# study   (GPU 0, in parallel; needs a second GPU): the harness study (false keeps on no-op commits,
#         detection of speedups)
# branches (both GPUs): the second part of the published session, two sessions in parallel from the
#         best commit of the first part (see lab/notebook/h200-research-sessions.md); BRANCHES overrides the split
# Each side's workers are pinned to their own two cores. Results land in $OUT.
# Needs the wheels in .whl/ (diffusers, gitpython, gitdb, smmap, importlib_metadata; git.deb if the
# machine has no git). Knobs: NULLS (20), TRIALS (4), STEPS (session sampling steps, 8), ROUNDS (8),
# SESSION_S (seconds the session may use in this call, 540), STUDY_S (560).
set -u
start=$(date +%s)
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
last_gpu=$(( $(nvidia-smi -L | wc -l) - 1 ))

(
  export CUDA_VISIBLE_DEVICES=$last_gpu
  if has tests; then
    timeout 200 python3 -m pytest tests/e2e/test_gpu_presets.py tests/e2e/test_gpu_determinism.py -m cuda -s -q -p no:cacheprovider \
      > "$OUT/gpu_tests.txt" 2>&1
  fi
  if has session; then
    if [ ! -d /tmp/h200/project ] && [ -f .h200state/session.tgz ]; then
      mkdir -p /tmp/h200 && for f in .h200state/session*.tgz; do tar xzf "$f" -C /tmp/h200; done
    fi
    budget=$(( start + ${SESSION_S:-540} - $(date +%s) ))
    DEADLINE=$(( $(date +%s) + budget )) MIN_LEFT="${MIN_LEFT:-200}" timeout "$budget" \
      bash examples/h200-session/replay.sh /tmp/h200 "${STEPS:-8}" "${ROUNDS:-8}" 8,9 > "$OUT/session.txt" 2>&1
    cp /tmp/h200/project/.autoresearch/results.tsv "$OUT/session_ledger.tsv" 2>/dev/null
    # three archives, each under the 16 MiB a returned file may have: the state, its git history, the runs' images
    (cd /tmp/h200 && find project/.autoresearch/runs -name '*.png' > /tmp/pngs.txt
     tar czf "$OUT/session.tgz" --exclude=project/.autoresearch/worktrees --exclude=project/.autoresearch/report \
       --exclude=project/.git --exclude-from=/tmp/pngs.txt . && tar czf "$OUT/session_git.tgz" project/.git \
       && tar czf "$OUT/session_png.tgz" -T /tmp/pngs.txt
     tar czf "$OUT/report.tgz" project/.autoresearch/report) 2>/dev/null
  fi
) &
(
  export CUDA_VISIBLE_DEVICES=0
  if has study; then
    timeout "${STUDY_S:-560}" python3 -m lab.studies.measured_study --lane dit-xl2-256 --nulls "${NULLS:-20}" --speedups 10,5,2 \
      --trials "${TRIALS:-4}" --steps 4 --rounds 10 --pool 6 --cpu-affinity 4,5 --out "$OUT/study.json" > "$OUT/study.txt" 2>&1
  fi
) &
if has branches; then
  # Two sessions at once, one per GPU, from the same starting commit (GPU:TAG:START:ONLY:CORES).
  for spec in ${BRANCHES:-0:a:01,03:04,05,10:8,9 1:b:01,03:06,07,08,09:24,25}; do
    IFS=: read -r gpu tag first only cores <<< "$spec"
    (
      budget=$(( start + ${SESSION_S:-540} - $(date +%s) ))
      [ "$tag" = a ] || export NO_START_PROFILE=1
      CUDA_VISIBLE_DEVICES=$gpu TAG="h200$tag" START="$first" ONLY="$only" DEADLINE=$(( $(date +%s) + budget )) \
        MIN_LEFT="${MIN_LEFT:-150}" timeout "$budget" \
        bash examples/h200-session/replay.sh "/tmp/h200$tag" "${STEPS:-8}" "${ROUNDS:-8}" "$cores" > "$OUT/branch-$tag.txt" 2>&1
      # the session's state without git, worktrees and per-case images (each returned file <= 16 MiB)
      (cd "/tmp/h200$tag" && tar czf "$OUT/branch-$tag.tgz" --exclude=project/.autoresearch/worktrees \
        --exclude=project/.autoresearch/baseline/*/cases --exclude='project/.autoresearch/runs/*/*.png' \
        --exclude='*.safetensors' project/.autoresearch ./*.json) 2>/dev/null
    ) &
  done
fi
wait
echo "done in $(( $(date +%s) - start )) s"
