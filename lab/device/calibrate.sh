#!/usr/bin/env bash
# The noise of a CUDA-graphed best, calibrated on one H200 (kind nvidia-h200), one call of at most 600 s:
#   STUDY_S=420 bash lab/device/calibrate.sh
# The noise of a CUDA-graphed best measured the way an experiment measures it: the study engine (the engine of
# `dit-ar calibrate`: the experiment's launcher, sandbox, compile caches and forked pairs) on dit-xl2-256 at
# 8 steps, 16 rounds a pair, on the tree the H200 ladder kept (patches 01 batched guidance, 04 regional
# compile, 07 bf16, 06 reduce-overhead CUDA graphs of examples/h200-session/patches/, in that order). Arms,
# measured round-robin: A/A pairs of the tree against itself, and pairs where the tree is truly faster by
# SPEEDUPS percent (the other side sleeps that fraction of the latency first, loop/speed/patching.py sleep_patch).
# Then `profile_of` (what `dit-ar calibrate` stores) prints the between-process sd, the bound B, the per-round
# noise and the rounds a 3/5/10% win needs. A second, eager arm (patch 01 only) runs when EAGER_S > 0.
# Writes $OUT/calibrate/{graphed,eager}.{json,txt}, profiles.txt, clocks.csv and $OUT/env.txt.
# Knobs: STUDY_S (graphed arm, default 420), EAGER_S (default 0), SPEEDUPS (default 3; "" for none),
# EAGER_SPEEDUPS (the eager arm's, default 10; "" for none), PAIRS (A/A,
# default 40), POOL (pairs forked at once, default 2),
# LANE / STEPS / PATCHES (default dit-xl2-256 / 8 / "01 04 07 06"); DEVICE=cpu rehearses the flow here on the
# CPU (the embedded-cpu lane, no patches, a short deadline).
set -u
. lab/device/lane_env.sh  # start, OUT, lane, patches, steps (DEVICE=cpu: a CPU rehearsal)
src="$PWD"; D="$OUT/calibrate"; mkdir -p "$D"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 1000 > "$D/clocks.csv" 2>/dev/null &
  smi=$!
fi
tree() {  # tree DIR PATCH...: a copy of the project's source with the named patches applied in order
  local dir="$1"; shift
  rm -rf "$dir"; mkdir -p "$dir"
  (cd "$src" && tar cf - --exclude=./.git --exclude=./.autoresearch --exclude=./.venv --exclude=./.whl .) |
    (cd "$dir" && tar xf -)
  for nn in "$@"; do
    (cd "$dir" && git apply "$(patch_file "$nn")") || return 1
  done
}
study() {  # study NAME SECONDS SPEEDUPS DIR
  ( cd "$4" && PYTHONPATH="${PYTHONPATH/$src/$4}" timeout $(( $2 + 40 )) python3 -m lab.studies.measured_study \
      --lane "$lane" ${steps:+--steps "$steps"} --null-segments "${PAIRS:-40}" --speedups "$3" \
      --segments-per-speedup "${PAIRS:-40}" --rounds 16 --old-rounds 16 --pool "${POOL:-2}" --deadline-s "$2" \
      ${UNSANDBOXED:+--unsandboxed} --out "$D/$1.json" ) > "$D/$1.txt" 2>&1
  echo "$1: exit $? after $(( $(date +%s) - start )) s" >> "$OUT/env.txt"
}
# shellcheck disable=SC2086
tree /tmp/w6-graphed $patches && study graphed "${STUDY_S:-420}" "${SPEEDUPS-3}" /tmp/w6-graphed
if [ "${EAGER_S:-0}" -gt 0 ]; then
  tree /tmp/w6-eager ${patches:+01} && study eager "$EAGER_S" "${EAGER_SPEEDUPS-10}" /tmp/w6-eager
fi
[ -n "${smi:-}" ] && kill "$smi" 2>/dev/null
python3 lab/device/calibration_profiles.py "$D" "$lane" graphed eager > "$D/profiles.txt" 2>&1
echo "total $(( $(date +%s) - start )) s" >> "$OUT/env.txt"
