#!/usr/bin/env bash
# Eager power on a GPU (kinds nvidia-h100-x1 or nvidia-h200; the run tool carries `.whl`), in at most TOTAL_S
# seconds (default 230):
#   bash lab/device/eager_power.sh
# One `dit-ar calibrate --pairs PAIRS --rounds ROUNDS` of the shipped fp32 eager DiT-XL/2 (lane dit-xl2-256 at
# STEPS=8 sampling steps, both sides on one core, pinned before build and checked every round), then
# lab/device/eager_power_profiles.py reads the same A/A pairs twice: their first CUT=16 rounds (the lane's
# calibration before calibration_rounds: 16-round pairs) and all ROUNDS (the longer pairs of the new lever).
# Each reading prints calibrate's statement: per-round noise, B, the power for a 10% and a 5% win within the
# design's 192 rounds, and what to change. The budget (--budget-s) is what is left before the deadline; a run
# cut short prints "incomplete" and is read as far as it got.
# Defaults: PAIRS=3 ROUNDS=32 (about 45 s a pair at 624 ms a generate on the H100). LANE=embedded-cpu rehearses the
# flow on this machine's CPU (no wheels; defaults there PAIRS=3 ROUNDS=8 CUT=4).
# Results in $OUT: calibrate.txt (calibrate's own output), profiles.txt (both readings), calibration.json (the
# A/A rounds), calibration.png, timing.txt, env.txt, clocks.csv (GPU).
set -u
start=$(date +%s)
here="$(cd "$(dirname "$0")" && pwd)"; src="$(cd "$here/../.." && pwd)"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
lane="${LANE:-dit-xl2-256}"; scratch="${SCRATCH:-/tmp/eager-power}"; project="$scratch/project"
deadline=$(( start + ${TOTAL_S:-230} ))
if [ "$lane" = embedded-cpu ]; then
  steps="${STEPS:-}"; pairs="${PAIRS:-3}"; rounds="${ROUNDS:-8}"; cutr="${CUT:-4}"
else
  steps="${STEPS:-8}"; pairs="${PAIRS:-3}"; rounds="${ROUNDS:-32}"; cutr="${CUT:-16}"
fi
stamp() { echo "$(date -u +%H:%M:%S) +$(( $(date +%s) - start )) s  $*" | tee -a "$OUT/timing.txt"; }
dit() { python3 -m pytest_dit_ar.cli --config config/autoresearch.json "$@"; }
. "$here/setup_machine.sh"
setup_machine
stamp "machine ready (lane $lane)"

rm -rf "$project"; mkdir -p "$project"
(cd "$src" && tar cf - --exclude=./.git --exclude=./.autoresearch --exclude=./.venv --exclude=./.whl \
  --exclude=./lab/data .) | (cd "$project" && tar xf -)
cd "$project" || exit 2
python3 - "$lane" "$steps" <<'PY'
import json, sys
path = "config/autoresearch.json"
cfg = json.load(open(path))
if sys.argv[2]:
    cfg["lanes"][sys.argv[1]]["steps"] = int(sys.argv[2])
json.dump(cfg, open(path, "w"), indent=2)
PY
git init -q -b main; git config user.name "dit-ar eager power"; git config user.email "eager-power@dit-ar.invalid"
git add -A && git commit -qm "eager power: $lane at ${steps:-default} steps"
dit init --tag eager-power --lane "$lane" > "$OUT/calibrate.txt" 2>&1 || { stamp "init failed"; cat "$OUT/calibrate.txt"; exit 2; }
stamp "project ready"

budget=$(( deadline - $(date +%s) - 15 ))
stamp "calibrate --pairs $pairs --rounds $rounds --budget-s $budget"
dit calibrate --pairs "$pairs" --rounds "$rounds" --budget-s "$budget" ${UNSANDBOXED:+--unsandboxed} \
  --figure "$OUT/calibration.png" >> "$OUT/calibrate.txt" 2>&1
stamp "calibrate exit $?"
data="$(ls .autoresearch/calibration-*.json 2>/dev/null | head -1)"
if [ -n "$data" ]; then
  cp "$data" "$OUT/calibration.json"
  python3 "$src/lab/device/eager_power_profiles.py" "$data" "$lane" "$cutr" > "$OUT/profiles.txt" 2>&1
fi
stamp "done"
[ -n "$smi" ] && kill "$smi" 2>/dev/null
cat "$OUT/calibrate.txt" "$OUT/profiles.txt" 2>/dev/null | tail -40
exit 0
