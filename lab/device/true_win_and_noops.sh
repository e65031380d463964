#!/usr/bin/env bash
# A known true win and real no-ops against a best, and queued GPU work, on one H200 (kind nvidia-h200), one call of at most 600 s:
#   TOTAL_S=560 bash lab/device/true_win_and_noops.sh
# 1. The GPU attack test of work queued on a side stream (tests/e2e/test_gpu_attacks.py): $OUT/gpu_attacks.txt.
# 2. A session whose baseline is the CUDA-graphed best of the H200 ladder (patches 01, 04, 07, 06 of
#    examples/h200-session/patches/, dit-xl2-256 at 8 steps, the lane's shipped verdict: 16 rounds a pair,
#    2..12 pairs, prior B 2.5%) slowed by a harness-written sleep of SLEEP_S per generate (loop/speed/patching.py
#    sleep_patch). The first experiment removes the sleep: a true exact win of SLEEP_S / (latency + SLEEP_S),
#    about 3% at the graphed best's 80 ms. Then no-op commits (a comment) against the kept best until the
#    deadline: real no-op decisions against a graphed best.
# Results: $OUT/session.txt (the whole log), $OUT/summary.txt / summary.json (lab/device/session_summary.py),
# $OUT/runs.tgz (ledger, every experiment.json / perf.json, noise.json, status), $OUT/env.txt.
# Knobs: TOTAL_S (default 560), SLEEP_S (default 0.0025; 0: no sleep, no win experiment: the session is the
# graphed best and its no-ops), WIN_SLEEP_S (the win shortens the sleep to this instead of removing it: a small
# win on rounds dominated by a precise sleep), NOOPS (default 8), LOADED_NOOPS (the last n no-ops run beside
# `nproc` busy processes; default 0), ATTACKS=0 skips step 1,
# LANE / STEPS / PATCHES (default dit-xl2-256 / 8 / "01 04 07 06"); DEVICE=cpu rehearses the flow here (the
# embedded-cpu lane, no patches).
set -u
total="${TOTAL_S:-560}"
. lab/device/lane_env.sh  # start, OUT, lane, patches, steps (DEVICE=cpu: a CPU rehearsal)
left() { echo $(( total - ($(date +%s) - start) )); }
src="$PWD"; log="$OUT/session.txt"; scratch=/tmp/w7; project="$scratch/project"
dit() { python3 -m pytest_dit_ar.cli --config config/autoresearch.json "$@"; }
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 1000 > "$OUT/clocks.csv" 2>/dev/null &
  smi=$!
fi
if [ "${ATTACKS:-1}" = 1 ]; then
  timeout 150 python3 -m pytest -q -s -p no:cacheprovider tests/e2e/test_gpu_attacks.py > "$OUT/gpu_attacks.txt" 2>&1
  echo "gpu attacks: exit $? after $(( $(date +%s) - start )) s" >> "$OUT/env.txt"
fi
rm -rf "$scratch"; mkdir -p "$project"
(cd "$src" && tar cf - --exclude=./.git --exclude=./.autoresearch --exclude=./.venv --exclude=./.whl .) |
  (cd "$project" && tar xf -)
cd "$project" || exit 2
git init -q -b main; git config user.name "dit-ar wave 7"; git config user.email "w7@dit-ar.invalid"
python3 - "$lane" "${steps:-0}" <<'PY'
import json, sys
path = "config/autoresearch.json"
cfg = json.load(open(path))
if int(sys.argv[2]):
    cfg["lanes"][sys.argv[1]]["steps"] = int(sys.argv[2])
json.dump(cfg, open(path, "w"), indent=2)
PY
for nn in $patches; do git apply "$(patch_file "$nn")" || exit 2; done
cp model_under_test/__init__.py "$scratch/init-unslowed.py"
slow() { [ "${SLEEP_S:-0.0025}" != 0 ]; }
if slow; then
  python3 -c "from pytest_dit_ar.loop.speed.patching import sleep_patch; print(sleep_patch(${SLEEP_S:-0.0025}, 'slow'))" \
    >> model_under_test/__init__.py
fi
git add -A && git commit -qm "wave 7: $lane${patches:+ with patches $patches}, slowed by ${SLEEP_S:-0.0025} s a generate"
{ dit doctor; dit init --tag w7 --lane "$lane" && dit baseline ${UNSANDBOXED:+--unsandboxed}; } >> "$log" 2>&1
echo "baseline: exit $? after $(( $(date +%s) - start )) s" >> "$OUT/env.txt"
judge() {  # judge CLASS DESCRIPTION: commit what the caller changed and run one experiment
  [ "$(left)" -ge 75 ] || { echo "=== $2: not started, the deadline is too close"; return 1; }
  git add -A model_under_test && git commit -qm "$2" && echo "=== $2 [$(date -u +%H:%M:%S)]"
  t0=$(date +%s)
  timeout $(( $(left) - 5 )) python3 -m pytest_dit_ar.cli --config config/autoresearch.json experiment \
    --classification "$1" --description "$2" ${UNSANDBOXED:+--unsandboxed} 2>&1 | tail -n 25
  echo "wall $(( $(date +%s) - t0 )) s"
}
if [ -f .autoresearch/results.tsv ]; then
  if slow; then
    cp "$scratch/init-unslowed.py" model_under_test/__init__.py
    if [ -n "${WIN_SLEEP_S:-}" ]; then  # a shorter sleep instead of none: a small win on precise rounds
      python3 -c "from pytest_dit_ar.loop.speed.patching import sleep_patch; print(sleep_patch($WIN_SLEEP_S, 'slow'))" \
        >> model_under_test/__init__.py
      judge exact "shorten the sleep per generate from $SLEEP_S s to $WIN_SLEEP_S s (a true exact win)" >> "$log" 2>&1
    else
      judge exact "remove the ${SLEEP_S:-0.0025} s sleep per generate (a true exact win)" >> "$log" 2>&1
    fi
  fi
  n=0
  while [ "$n" -lt "${NOOPS:-8}" ]; do
    echo "# no-op $((n + 1))" >> model_under_test/__init__.py
    loaded=""
    if [ $(( ${NOOPS:-8} - n )) -le "${LOADED_NOOPS:-0}" ]; then  # the last LOADED_NOOPS under a competing load
      loaded=" under a competing load of $(nproc) busy processes"
      for _ in $(seq "$(nproc)"); do python3 -c "while True: pass" & done
    fi
    judge exact "no-op against the best $((n + 1)): a comment$loaded" >> "$log" 2>&1 || break
    [ -n "$loaded" ] && pkill -f "while True: pass"
    n=$((n + 1))
  done
  pkill -f "while True: pass" 2>/dev/null
  mkdir -p "$scratch/out"
  cp .autoresearch/results.tsv "$scratch/out/ledger.tsv"
  cp .autoresearch/noise.json "$scratch/out/" 2>/dev/null
  for f in .autoresearch/runs/*/experiment.json .autoresearch/runs/*/perf.json .autoresearch/runs/*/baseline.json; do
    [ -f "$f" ] && cp "$f" "$scratch/out/$(basename "$(dirname "$f")")-$(basename "$f")"
  done
  dit status --rows 30 > "$scratch/out/status.txt" 2>&1
  python3 "$src/lab/device/session_summary.py" "$project" "$OUT/summary.json" > "$OUT/summary.txt" 2>&1
  tar czf "$OUT/runs.tgz" -C "$scratch" out
fi
[ -n "${smi:-}" ] && kill "$smi" 2>/dev/null
echo "total $(( $(date +%s) - start )) s" >> "$OUT/env.txt"
