#!/usr/bin/env bash
# Issue 21 on one H200 (kind nvidia-h200), at most ~300 s:  bash lab/device/wave4_ladder.sh
# The ladder of examples/h200-session/ replayed from the start on dit-xl2-256 at 8 steps, 8 rounds, sandboxed:
# the starting commit batches classifier-free guidance (patch 01, fp32 eager: the baseline), then regional
# compile (04), whole compile (05), CUDA graphs (06, reduce-overhead) and bf16 (07, numerical) are each judged
# on their steady-state speed, every worker after a tree's first starting from the harness's compile cache of
# its tree. The hand-made CUDA graphs of examples/cuda-graphs/ (no compile) are judged last when time is left and
# patch 06 was not kept (graphs by hand inside reduce-overhead's graphs cannot work); HAND_GRAPHS=1 judges them
# in the place of 06 instead (then 07).
# Results in $OUT/ladder/: session.txt (the whole log), summary.json / summary.txt (per experiment: verdict,
# estimate, warm-up rounds per side, warm start, cold compile; the kept chain's speed-up over the fp32 eager
# baseline), the ledger and every perf.json / experiment.json. lab/notebook/h200-research-sessions.md ("Wave 4") waits for them.
# Knobs: SESSION_S (default 290), ONLY (default 04,05,06,07).
set -u
. lab/device/h200_env.sh  # wheels, bubblewrap, environment, $OUT/env.txt, UNSANDBOXED
dir="$OUT/ladder"; mkdir -p "$dir"
src="$PWD"; scratch=/tmp/wave4-ladder; project="$scratch/project"
total="${SESSION_S:-290}"
left() { echo $(( total - ($(date +%s) - start) )); }
judge() {  # judge PATCH CLASS DESCRIPTION: commit the patch in the session's project and run one experiment
  [ "$(left)" -ge 50 ] || { echo "=== $3: not started, the deadline is too close"; return; }
  ( cd "$project" && git apply "$1" && git add -A model_under_test && git commit -qm "$3" &&
    echo "=== $3 [$(date -u +%H:%M:%S)]" &&
    timeout $(( $(left) - 5 )) python3 -m pytest_dit_ar.cli --config config/autoresearch.json experiment \
      --classification "$2" --description "$3" ${UNSANDBOXED:+--unsandboxed} 2>&1 | tail -n 25 )
}
hand="$src/examples/cuda-graphs/cuda-graphs.patch"
hand_desc="CUDA graphs by hand (examples/cuda-graphs): the DiT forward captured over static buffers, no compile"
# HAND_GRAPHS=1 judges the hand-made graphs in the place of patch 06 (reduce-overhead), then bf16
only="${ONLY:-$([ -n "${HAND_GRAPHS:-}" ] && echo 04,05 || echo 04,05,06,07)}"
DEADLINE=$(( $(date +%s) + $(left) )) MIN_LEFT=45 NO_START_PROFILE=1 START=01 ONLY="$only" \
  timeout "$(left)" bash examples/h200-session/replay.sh "$scratch" 8 8 > "$dir/session.txt" 2>&1
if [ -d "$project/.autoresearch" ]; then
  if [ -n "${HAND_GRAPHS:-}" ]; then
    judge "$hand" exact "$hand_desc" >> "$dir/session.txt" 2>&1
    judge "$(ls "$src"/examples/h200-session/patches/07-*.patch)" numerical \
      "$(sed -n 's/^Subject: //p' "$src"/examples/h200-session/patches/07-*.patch | head -1)" >> "$dir/session.txt" 2>&1
  elif ! grep -P '\tkeep\t' "$project/.autoresearch/results.tsv" | grep -q "reduce-overhead"; then
    judge "$hand" exact "$hand_desc" >> "$dir/session.txt" 2>&1  # graphs by hand need a best without them
  fi
  cp "$project/.autoresearch/results.tsv" "$dir/ledger.tsv"
  for f in "$project"/.autoresearch/runs/*/experiment.json "$project"/.autoresearch/runs/*/perf.json; do
    [ -f "$f" ] && cp "$f" "$dir/$(basename "$(dirname "$f")")-$(basename "$f")"
  done
  { ls -la "$project/.autoresearch/compile-cache"; du -sh "$project"/.autoresearch/compile-cache/*; } \
    > "$dir/compile-cache.txt" 2>&1
  python3 lab/device/wave4_summary.py "$project" "$dir/summary.json" > "$dir/summary.txt" 2>&1
fi
echo "total $(( $(date +%s) - start )) s" >> "$OUT/env.txt"
