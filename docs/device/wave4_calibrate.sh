#!/usr/bin/env bash
# Issue 20 (statistics): the machine's noise profile on the H200 for the new verdict, eager and CUDA-graphed.
#   bash docs/device/wave4_calibrate.sh          (kind nvidia-h200, about 200 s)
# 1. eager: the study engine (the engine of `dit-ar calibrate`; since wave 5 on the experiment's launcher and
#    fork servers) on dit-xl2-256 at 8 steps, 16 rounds per pair,
#    A/A pairs plus two pairs with an injected true 10% speedup, both sides pinned to core 2.
# 2. graphed: the same on a copy of the tree with examples/h200-session/patches/06-exact-cuda-graphs.patch
#    applied (the whole forward in reduce-overhead mode), A/A pairs only, until its deadline.
# 3. profile: each run through pytest_dit_ar.loop.calibration.profile_of (what `dit-ar calibrate` stores):
#    between-pair sd, the bound B, per-round noise, median generate, rounds a 3/5/10% win needs.
# Writes $OUT/calibrate/{eager,graphed}.{json,txt}, profiles.txt, clocks.csv. Knobs: EAGER_S, GRAPHED_S.
set -u
. docs/device/h200_env.sh  # wheels, bubblewrap, environment, $OUT/env.txt, UNSANDBOXED
D="$OUT/calibrate"; mkdir -p "$D"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 500 > "$D/clocks.csv" 2>/dev/null &
smi=$!
study() {  # $1 name, $2 seconds, $3 speedups, $4 tree
  ( cd "$4" && timeout $(( $2 + 25 )) python3 -m pytest_dit_ar.loop.study --lane dit-xl2-256 --steps 8 \
      --null-segments 6 --speedups "$3" --segments-per-speedup 2 --rounds 16 --old-rounds 16 --pool 2 \
      --cpu-affinity 2 --deadline-s "$2" ${UNSANDBOXED:+--unsandboxed} --out "$D/$1.json" ) > "$D/$1.txt" 2>&1
}
study eager "${EAGER_S:-85}" 10 "$PWD"
G=/tmp/graphed; rm -rf "$G"; mkdir -p "$G"
cp -r pytest_dit_ar quality_suite perf_suite dit_ar_contract model_under_test config assets conftest.py pyproject.toml "$G"/
( cd "$G" && git apply "$OLDPWD/examples/h200-session/patches/06-exact-cuda-graphs.patch" ) >> "$D/graphed.txt" 2>&1
PYTHONPATH="/tmp/site:$G" study graphed "${GRAPHED_S:-55}" "" "$G"
kill "$smi" 2>/dev/null
python3 - "$D" > "$D/profiles.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path
from dit_ar_contract.config import load_config
from perf_suite.sequential import Design
from perf_suite.studies import StudyResults
from pytest_dit_ar.loop.calibration import Collected, describe, profile_of
d = Path(sys.argv[1])
lane = load_config("config/autoresearch.json").lanes["dit-xl2-256"]
for name in ("eager", "graphed"):
    path = d / f"{name}.json"
    if not path.is_file():
        print(f"{name}: no data"); continue
    res = StudyResults.read(path)
    null = res.null
    forked = sum(bool(p.forked) for p in null)
    print(f"== {name}: {len(null)} A/A pairs ({forked} forked), wall {res.wall_s:.0f} s, {res.stopped or 'complete'}")
    if len(null) < 2:
        continue
    prof = profile_of(Collected(res, len(null)), "dit-xl2-256", name, lane.performance, "latency_ms")
    print("\n".join(describe(prof, Design.from_protocol(lane.performance, "latency_ms"))))
    print(json.dumps(prof.as_dict()))
PY
echo "total $(( $(date +%s) - start )) s" >> "$OUT/env.txt"
