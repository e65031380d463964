#!/usr/bin/env bash
# What ran on the H200 machine (kind nvidia-h200-x2) for the sequential verdict (issue 12), sandboxed:
#   bash lab/device/h200_wave3.sh
# GPU 0: `lab.studies.measured_study` on dit-xl2-256 at 8 steps (no-op segments, injected true speedups,
#        old and new protocol on the same segments). GPU 1: the research session of examples/h200-session
#        (baseline and the candidates in order until the deadline), for the verdicts and the wall time per
#        experiment. Each side's workers are pinned to cores of their own. Results land in $OUT.
# Needs in .whl/ what lab/device/h200_env.sh says. Knobs: STUDY_S, SESSION_S (seconds).
set -u
. lab/device/h200_env.sh  # wheels, bubblewrap, environment, $OUT/env.txt, UNSANDBOXED
(
  export CUDA_VISIBLE_DEVICES=0
  timeout "${STUDY_S:-540}" python3 -m lab.studies.measured_study --lane dit-xl2-256 --steps 8 --null-segments 40 \
    --speedups 3,5,10 --segments-per-speedup 16 --pool 2 --cpu-affinity 2,3 --deadline-s $(( ${STUDY_S:-540} - 40 )) \
    ${UNSANDBOXED:+--unsandboxed} --out "$OUT/study.json" --figure "$OUT/study.png" > "$OUT/study.txt" 2>&1
) &
(
  export CUDA_VISIBLE_DEVICES=1
  budget=$(( ${SESSION_S:-550} - ($(date +%s) - start) ))
  DEADLINE=$(( $(date +%s) + budget )) MIN_LEFT=70 NO_START_PROFILE=1 timeout "$budget" \
    bash examples/h200-session/replay.sh /tmp/h200 8 8 8,9 > "$OUT/session.txt" 2>&1
  cp /tmp/h200/project/.autoresearch/results.tsv "$OUT/session_ledger.tsv" 2>/dev/null
  for f in /tmp/h200/project/.autoresearch/runs/*/experiment.json; do
    [ -f "$f" ] && cp "$f" "$OUT/$(basename "$(dirname "$f")")-experiment.json"
  done
  for f in /tmp/h200/project/.autoresearch/runs/*/perf.json; do
    [ -f "$f" ] && cp "$f" "$OUT/$(basename "$(dirname "$f")")-perf.json"
  done
) &
wait
echo "total $(( $(date +%s) - start )) s" >> "$OUT/env.txt"
