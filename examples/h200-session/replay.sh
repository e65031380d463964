#!/usr/bin/env bash
# Replay the H200 research session on the dit-xl2-256 lane in one command:
#   bash examples/h200-session/replay.sh [SCRATCH_DIR] [STEPS] [ROUNDS] [CPU_CORES]
# It copies the project into a fresh repository in SCRATCH_DIR/project, sets the lane's sampling
# steps and timed rounds (the published run used 8 and 8 to fit a 30-minute device budget), runs
# doctor -> init -> baseline -> profile, then commits each patch of examples/h200-session/patches/
# in order and judges it with `dit-ar experiment` (declared class taken from the patch's file name).
# It ends with status, a profile of the final best and the report.
# Resumable: run it again on the same SCRATCH_DIR and it skips the setup and every patch whose
# description is already in the ledger. DEADLINE (epoch seconds, optional) stops it before an
# experiment that might not finish in time (MIN_LEFT seconds, default 240), so nothing is killed.
# UNSANDBOXED=1 runs the workers without bubblewrap (recorded in the ledger).
# Branches (how the published session ran on two GPUs at once): START="01,03" applies those patches
# to the starting commit (so the session's baseline is that commit), ONLY="04,05" judges just those
# patches, TAG names the session (default h200). LANE picks another lane (default dit-xl2-256; the two-GPU
# lane dit-xl2-256-x2 for multi-GPU candidates, lab/device/cfg_parallel_and_side_by_side.sh).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$here/../.." && pwd)"
scratch="${1:-$(mktemp -d /tmp/dit-ar-h200-XXXX)}"
steps="${2:-10}"
rounds="${3:-10}"
cores="${4:-}"
repo="$scratch/project"
dit() { python3 -m pytest_dit_ar.cli --config config/autoresearch.json "$@"; }
picked() { case ",$1," in *",${2%%-*},"*) return 0;; esac; return 1; }   # picked LIST NN-name
time_left() { [ -z "${DEADLINE:-}" ] || [ $(( DEADLINE - $(date +%s) )) -ge "${MIN_LEFT:-240}" ]; }

setup() {
  mkdir -p "$repo" && cd "$repo" || exit 2
  # a fresh repository holding the source tree as it is (committed or not), without state or venvs
  (cd "$src" && tar cf - --exclude=./.git --exclude=./.autoresearch --exclude=./.venv --exclude=./.whl \
    --exclude=./.h200state .) | tar xf -
  git init -q -b main
  git config user.name "dit-ar h200 session"; git config user.email "h200@dit-ar.invalid"
  python3 - "$steps" "$rounds" "$cores" "${LANE:-dit-xl2-256}" <<'PY'
import json, sys
path = "config/autoresearch.json"
cfg = json.load(open(path))
lane = cfg["lanes"][sys.argv[4]]
lane["steps"] = int(sys.argv[1])
lane.setdefault("performance", {})["rounds"] = int(sys.argv[2])
if sys.argv[3]:
    lane["performance"]["cpu_affinity"] = [int(c) for c in sys.argv[3].split(",")]
json.dump(cfg, open(path, "w"), indent=2)
PY
  for patch in "$here"/patches/*.patch; do
    if picked "${START:-}" "$(basename "$patch")"; then git apply "$patch" || exit 2; fi
  done
  git add -A && git commit -qm "H200 session: ${LANE:-dit-xl2-256} at $steps steps, $rounds rounds${START:+, starting from patches $START}" || exit 2
  dit doctor
  dit init --tag "${TAG:-h200}" --lane "${LANE:-dit-xl2-256}" || exit 2
  dit baseline --quiet ${UNSANDBOXED:+--unsandboxed} || exit 2
  if [ -z "${NO_START_PROFILE:-}" ]; then dit profile --json > "$scratch/profile-start.json" || true; fi
}

if [ -f "$repo/.autoresearch/results.tsv" ]; then
  cd "$repo" || exit 2
  echo "resuming the session in $repo"
  # an experiment killed mid-way leaves its candidate commit: go back to the recorded best
  best="$(dit status --json | python3 -c 'import json, sys; b = json.load(sys.stdin)["best"]; print(b["ref"] or b["commit"])')"
  git reset -q --hard "$best" && git clean -qfd model_under_test
  dit recover || true
else
  setup
fi
for patch in "$here"/patches/*.patch; do
  name="$(basename "$patch" .patch)"            # NN-class-slug
  cls="$(echo "$name" | cut -d- -f2)"
  desc="$(sed -n 's/^Subject: //p' "$patch" | head -1)"
  desc="${desc:-$name}"
  if [ -n "${ONLY:-}" ] && ! picked "$ONLY" "$name"; then continue; fi
  if picked "${START:-}" "$name"; then echo "=== $name: part of the starting commit"; continue; fi
  if cut -f16 .autoresearch/results.tsv | grep -qxF -- "$desc"; then echo "=== $name: already judged"; continue; fi
  if ! time_left; then echo "=== $name: not started, the deadline is too close"; continue; fi
  git apply "$patch" || { echo "patch $name does not apply"; continue; }
  git add -A model_under_test && git commit -qm "$desc"
  echo "=== $name ($cls): $desc  [$(date -u +%H:%M:%S)]"
  t0=$(date +%s)
  dit experiment --classification "$cls" --description "$desc" ${UNSANDBOXED:+--unsandboxed} 2>&1 | tail -n 25
  echo "wall $(( $(date +%s) - t0 )) s"
done
dit status --rows 30
if time_left; then dit profile --json > "$scratch/profile-best.json" || true; fi
dit report
echo "session state: $repo/.autoresearch"
