#!/usr/bin/env bash
# Issue 20 (statistics): the machine's noise profile on the H200 for the new verdict, eager and CUDA-graphed.
#   bash lab/device/wave4_calibrate.sh          (kind nvidia-h200, about 200 s)
# 1. eager: the study engine (the engine of `dit-ar calibrate`; since wave 5 on the experiment's launcher and
#    fork servers) on dit-xl2-256 at 8 steps, 16 rounds per pair,
#    A/A pairs plus two pairs with an injected true 10% speedup, both sides pinned to core 2.
# 2. graphed: the same on a copy of the tree with examples/h200-session/patches/06-exact-cuda-graphs.patch
#    applied (the whole forward in reduce-overhead mode), A/A pairs only, until its deadline.
# 3. profile: each run through pytest_dit_ar.loop.speed.calibration.profile_of (what `dit-ar calibrate` stores):
#    between-pair sd, the bound B, per-round noise, median generate, rounds a 3/5/10% win needs.
# Writes $OUT/calibrate/{eager,graphed}.{json,txt}, profiles.txt, clocks.csv. Knobs: EAGER_S, GRAPHED_S.
set -u
. lab/device/h200_env.sh  # wheels, bubblewrap, environment, $OUT/env.txt, UNSANDBOXED
D="$OUT/calibrate"; mkdir -p "$D"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 500 > "$D/clocks.csv" 2>/dev/null &
smi=$!
study() {  # $1 name, $2 seconds, $3 speedups, $4 tree
  ( cd "$4" && timeout $(( $2 + 25 )) python3 -m lab.studies.measured_study --lane dit-xl2-256 --steps 8 \
      --null-segments 6 --speedups "$3" --segments-per-speedup 2 --rounds 16 --old-rounds 16 --pool 2 \
      --cpu-affinity 2 --deadline-s "$2" ${UNSANDBOXED:+--unsandboxed} --out "$D/$1.json" ) > "$D/$1.txt" 2>&1
}
study eager "${EAGER_S:-85}" 10 "$PWD"
G=/tmp/graphed; rm -rf "$G"; mkdir -p "$G"
cp -r pytest_dit_ar quality_suite perf_suite dit_ar_contract lab model_under_test config assets conftest.py pyproject.toml "$G"/
( cd "$G" && git apply "$OLDPWD/examples/h200-session/patches/06-exact-cuda-graphs.patch" ) >> "$D/graphed.txt" 2>&1
PYTHONPATH="/tmp/site:$G" study graphed "${GRAPHED_S:-55}" "" "$G"
kill "$smi" 2>/dev/null
python3 lab/device/calibration_profiles.py "$D" dit-xl2-256 eager graphed > "$D/profiles.txt" 2>&1
echo "total $(( $(date +%s) - start )) s" >> "$OUT/env.txt"
