#!/usr/bin/env bash
# Two GPUs of one host: CFG-parallel judged end to end, and two sessions' timing noise side by side, for the device tool's kind nvidia-h200-x2 (NOT YET RUN: written when this
# session's device time was spent; read the output before trusting it):
#   PART=cfg  bash lab/device/cfg_parallel_and_side_by_side.sh   # ~6 min: CFG-parallel judged end to end
#   PART=side bash lab/device/cfg_parallel_and_side_by_side.sh   # ~6 min: two sessions' timing noise, alone and at once
# PART=cfg: a session on lane dit-xl2-256-x2 (both GPUs visible to each worker) at 8 steps: baseline,
#   patch 01 (batched CFG on one GPU, the single-GPU best), then examples/cfg-parallel/cfg-parallel.patch
#   judged against it as `exact`. Ledger, experiment.json and perf.json of each run land in $OUT.
# PART=side: the harness study (no-op segments and a 5% injected speed-up) on GPU 0 alone, then on GPU 0
#   and GPU 1 at once (workers pinned to cores of their own): the spread of no-op segments and the
#   resampled false keeps, alone against side by side.
# Needs in .whl/ what lab/device/gpu_env.sh says.
set -u
. lab/device/gpu_env.sh  # wheels, bubblewrap, environment, $OUT/env.txt, UNSANDBOXED

collect() {  # collect PROJECT: the ledger and each run's verdict and timing
  cp "$1/.autoresearch/results.tsv" "$OUT/ledger.tsv" 2>/dev/null
  for f in "$1"/.autoresearch/runs/*/experiment.json "$1"/.autoresearch/runs/*/perf.json; do
    [ -f "$f" ] && cp "$f" "$OUT/$(basename "$(dirname "$f")")-$(basename "$f")"
  done
}

study() {  # study GPU CORES NAME
  CUDA_VISIBLE_DEVICES="$1" timeout 200 python3 -m lab.studies.measured_study --lane dit-xl2-256 --steps 8 \
    --null-segments 12 --speedups 5 --segments-per-speedup 6 --pool 2 --cpu-affinity "$2" --deadline-s 160 \
    ${UNSANDBOXED:+--unsandboxed} --out "$OUT/study-$3.json" > "$OUT/study-$3.txt" 2>&1
}

case "${PART:-cfg}" in
  cfg)
    LANE=dit-xl2-256-x2 TAG=x2 ONLY=01 NO_START_PROFILE=1 \
      bash examples/h200-session/replay.sh /tmp/x2 8 8 2,3 > "$OUT/session.txt" 2>&1
    cd /tmp/x2/project || exit 2
    desc="CFG-parallel: the unconditional half of classifier-free guidance on the lane's second GPU"
    git apply "$OLDPWD/examples/cfg-parallel/cfg-parallel.patch" && git add -A model_under_test && git commit -qm "$desc"
    t0=$(date +%s)
    python3 -m pytest_dit_ar.cli experiment --classification exact --description "$desc" \
      ${UNSANDBOXED:+--unsandboxed} > "$OUT/cfg-parallel.txt" 2>&1
    echo "wall $(( $(date +%s) - t0 )) s" >> "$OUT/cfg-parallel.txt"
    collect /tmp/x2/project
    ;;
  side)
    study 0 4,5 alone
    study 0 4,5 pair-gpu0 & study 1 6,7 pair-gpu1 & wait
    ;;
esac
echo "total $(( $(date +%s) - start )) s" >> "$OUT/env.txt"
