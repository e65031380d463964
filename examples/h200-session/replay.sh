#!/usr/bin/env bash
# Replay the H200 research session on the dit-xl2-256 lane in one command:
#   bash examples/h200-session/replay.sh [SCRATCH_DIR] [STEPS] [ROUNDS] [CPU_CORES]
# It clones the project into SCRATCH_DIR, sets the lane's sampling steps and timed rounds (the
# published run used 10 and 10 to fit a 30-minute device budget), runs doctor -> init -> baseline ->
# profile, then commits each patch in examples/h200-session/patches/ in order and judges it with
# `dit-ar experiment` (declared class taken from the patch's file name). Ends with status and report.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$here/../.." && pwd)"
scratch="${1:-$(mktemp -d /tmp/dit-ar-h200-XXXX)}"
steps="${2:-10}"
rounds="${3:-10}"
cores="${4:-}"
repo="$scratch/project"
mkdir -p "$repo"
# a fresh repository holding the source tree as it is (committed or not), without its state or venv
(cd "$src" && tar cf - --exclude=./.git --exclude=./.autoresearch --exclude=./.venv --exclude=./.whl .) | (cd "$repo" && tar xf -)
cd "$repo"
git init -q -b main
git config user.name "dit-ar h200 session"; git config user.email "h200@dit-ar.invalid"
python3 - "$steps" "$rounds" "$cores" <<'PY'
import json, sys
path = "config/autoresearch.json"
cfg = json.load(open(path))
lane = cfg["lanes"]["dit-xl2-256"]
lane["steps"] = int(sys.argv[1])
lane.setdefault("performance", {})["rounds"] = int(sys.argv[2])
if sys.argv[3]:
    lane["performance"]["cpu_affinity"] = [int(c) for c in sys.argv[3].split(",")]
json.dump(cfg, open(path, "w"), indent=2)
PY
git add -A && git commit -qm "H200 session: dit-xl2-256 at $steps steps, $rounds rounds" || exit 2
dit() { python3 -m pytest_dit_ar.cli --config config/autoresearch.json "$@"; }
dit doctor
dit init --tag h200 --lane dit-xl2-256 || exit 2
dit baseline --quiet || exit 2
dit profile --json > "$scratch/profile-baseline.json" || true
for patch in "$here"/patches/*.patch; do
  name="$(basename "$patch" .patch)"            # NN-class-slug
  cls="$(echo "$name" | cut -d- -f2)"
  desc="$(sed -n 's/^Subject: //p' "$patch" | head -1)"
  desc="${desc:-$name}"
  git apply "$patch" || { echo "patch $name does not apply"; continue; }
  git add -A model_under_test && git commit -qm "$desc"
  echo "=== $name ($cls): $desc"
  dit experiment --classification "$cls" --description "$desc" 2>&1 | tail -n 25
done
dit status --rows 30
dit report
echo "session state: $repo/.autoresearch"
