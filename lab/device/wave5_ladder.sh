#!/usr/bin/env bash
# Issue 21 (and issue 20's graphed regime) on one H200, kind nvidia-h200, one call of at most 600 s:
#   bash lab/device/wave5_ladder.sh
# The ladder of examples/h200-session/ replayed on dit-xl2-256 at 8 steps, 8 rounds, sandboxed, from the fp32
# eager baseline (patch 01, batched guidance) through regional compile (04), whole compile (05), CUDA graphs
# (06, reduce-overhead) and bf16 (07), every worker after a tree's first starting from the harness's compile
# cache of its tree (wave 5 fix: the fork servers now mount that cache too). Resumable: run it again on the same
# warm machine and it goes on where the last call stopped (the session lives in /tmp/wave5-ladder). When the
# ladder is done and time is left, no-op commits are judged against the kept best (A/A rounds of the best's
# regime for the statistics, issue 20), then the hand-made CUDA graphs (examples/cuda-graphs) when 06 was
# not kept.
# Results (at most 8 files come back): $OUT/ladder.tgz (ledger, every perf.json / experiment.json, the compile
# cache listing), $OUT/session.txt (the whole log), $OUT/summary.txt and $OUT/summary.json
# (lab/device/wave4_summary.py: per experiment verdict, estimate, warm-up rounds, warm start, cold compile;
# the kept chain's speed-up over the baseline), $OUT/env.txt.  Knobs: SESSION_S (default 560), NOOPS (max 6),
# SCRATCH (default /tmp/wave5-ladder), LATER (the steps after 04, default "06 07 05"; 'hand' names the hand-made
# graphs, "07|10" judges 10 only when 07 was not kept).
set -u
. lab/device/h200_env.sh  # wheels, bubblewrap, environment, $OUT/env.txt, UNSANDBOXED
src="$PWD"; scratch="${SCRATCH:-/tmp/wave5-ladder}"; project="$scratch/project"; log="$OUT/session.txt"
total="${SESSION_S:-560}"
left() { echo $(( total - ($(date +%s) - start) )); }
# the zygote's prelude must leave CUDA alone with the compile stack imported (worker/zygote.py, GPU lanes)
PYTORCH_NVML_BASED_CUDA_CHECK=1 python3 -c "import torch, torch._dynamo, torch._inductor.compile_fx, sys; \
sys.exit(torch.cuda.is_initialized())" >> "$OUT/env.txt" 2>&1 || {
  echo "compile stack initialises CUDA here: preloading it is switched off for this run" >> "$OUT/env.txt"
  sed -i 's/^COMPILE_PRELOAD = .*/COMPILE_PRELOAD: tuple = ()/' pytest_dit_ar/worker/zygote.py; }
judge() {  # judge PATCH_OR_- CLASS DESCRIPTION: commit the patch (or a comment) and run one experiment
  [ "$(left)" -ge 75 ] || { echo "=== $3: not started, the deadline is too close"; return 1; }
  ( cd "$project" || exit 1
    if [ "$1" = - ]; then echo "# $3" >> model_under_test/__init__.py; else git apply "$1" || exit 1; fi
    git add -A model_under_test && git commit -qm "$3" && echo "=== $3 [$(date -u +%H:%M:%S)]" &&
    t0=$(date +%s) &&
    timeout $(( $(left) - 5 )) python3 -m pytest_dit_ar.cli --config config/autoresearch.json experiment \
      --classification "$2" --description "$3" ${UNSANDBOXED:+--unsandboxed} 2>&1 | tail -n 25
    echo "wall $(( $(date +%s) - t0 )) s" )
}
DEADLINE=$(( $(date +%s) + $(left) )) MIN_LEFT=75 NO_START_PROFILE=1 START=01 ONLY="${ONLY:-04}" \
  timeout "$(left)" bash examples/h200-session/replay.sh "$scratch" 8 8 >> "$log" 2>&1
if [ -d "$project/.autoresearch" ]; then
  ledger="$project/.autoresearch/results.tsv"
  # then CUDA graphs (06: the whole forward compiled in reduce-overhead mode) and bf16 (07), whole compile in
  # default mode (05, which 06 supersedes) last
  hand="CUDA graphs by hand (examples/cuda-graphs): the DiT forward captured over static buffers"
  judge_nn() {  # judge_nn NN|hand: judge that step unless the ledger has it (0: judged or already there)
    local patch name desc
    if [ "$1" = hand ]; then
      last_desc="$hand"; cut -f16 "$ledger" | grep -qxF -- "$hand" && return 0
      judge "$src/examples/cuda-graphs/cuda-graphs.patch" exact "$hand" >> "$log" 2>&1; return
    fi
    patch="$(ls "$src"/examples/h200-session/patches/"$1"-*.patch)"; name="$(basename "$patch" .patch)"
    desc="$(sed -n 's/^Subject: //p' "$patch" | head -1)"; last_desc="$desc"
    cut -f16 "$ledger" | grep -qxF -- "$desc" && return 0
    judge "$patch" "$(echo "$name" | cut -d- -f2)" "$desc" >> "$log" 2>&1
  }
  # LATER lists steps in order; 'hand' is the hand-made graphs; "07|10" judges 10 only when 07 was not kept
  for step in ${LATER:-06 07 05}; do
    for alt in ${step//|/ }; do
      judge_nn "$alt" || break 2
      awk -F'\t' '$6 == "keep" { print $16 }' "$ledger" | grep -qxF -- "$last_desc" && break
    done
  done
  if ! grep -qF "reduce-overhead" "$ledger" || ! grep -P '\tkeep\t' "$ledger" | grep -qF "reduce-overhead"; then
    grep -qF "CUDA graphs by hand" "$ledger" || judge "$src/examples/cuda-graphs/cuda-graphs.patch" exact \
      "$hand" >> "$log" 2>&1
  fi
  n=$(grep -c "no-op against the best" "$ledger")
  while [ "$n" -lt "${NOOPS:-6}" ] && judge - exact "no-op against the best $((n + 1)): a comment" >> "$log" 2>&1; do
    n=$((n + 1))
  done
  mkdir -p "$scratch/out"
  cp "$ledger" "$scratch/out/ledger.tsv"
  for f in "$project"/.autoresearch/runs/*/experiment.json "$project"/.autoresearch/runs/*/perf.json; do
    [ -f "$f" ] && cp "$f" "$scratch/out/$(basename "$(dirname "$f")")-$(basename "$f")"
  done
  { ls -la "$project/.autoresearch/compile-cache"; du -sh "$project"/.autoresearch/compile-cache/*;
    cat "$project"/.autoresearch/compile-cache/*.json; } > "$scratch/out/compile-cache.txt" 2>&1
  (cd "$project" && python3 -m pytest_dit_ar.cli --config config/autoresearch.json status --rows 30) \
    > "$scratch/out/status.txt" 2>&1
  python3 lab/device/wave4_summary.py "$project" "$OUT/summary.json" > "$OUT/summary.txt" 2>&1
  tar czf "$OUT/ladder.tgz" -C "$scratch" out
fi
echo "total $(( $(date +%s) - start )) s" >> "$OUT/env.txt"
