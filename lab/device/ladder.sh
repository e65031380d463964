#!/usr/bin/env bash
# The GPU ladder of examples/gpu-ladder/ judged as ONE session on one H200 or H100 (kinds nvidia-h200,
# nvidia-h100-x1), in calls of at most 9 minutes on the same warm machine (the session lives in $SCRATCH):
#   bash lab/device/ladder.sh     # call 1: set-up, init, baseline, then each step that fits before the deadline
#   bash lab/device/ladder.sh     # call 2 (same machine): resumes, judges the remaining steps, profiles, reports
# The run tool must carry `.whl` (the wheels: diffusers, gitpython, gitdb, smmap, importlib_metadata, shtab,
# rapidfuzz, and deb/bubblewrap_*.deb; the device has python 3.12 and torch, no diffusers).
#
# Each step is one `dit-ar experiment` of one patch, in order, its class the file name's second field and its
# description the patch's Subject line; lane dit-xl2-256 at STEPS sampling steps and ROUNDS timed rounds a
# segment (defaults 8 and 8; the lane ships 25 and 16), sandboxed when bubblewrap works there. After the steps in
# PROFILE_AFTER (default "04 end": the hand-graphed best and the final best) it runs `dit-ar profile` of the best.
# The deadline: DEADLINE (epoch seconds), else SESSION_S seconds from this call's start (default 530, at most 570:
# the summary and the returned files need the rest of the run tool's 600 s). No step starts with less time left
# than it may need: MIN_LEFT seconds (default 120; plain steps took 78-104 s on an H100) or, for a patch that calls
# torch's compile, MIN_LEFT_COMPILE (default 170; the regional compile took 141 s); a running one is stopped
# before the deadline (it records nothing; the next call resets to the best and judges it again). A step that is
# not started stops the chain there (the order matters). Nothing else limits a call: once the experiments are
# fast, the whole chain (baseline, every step, the profiles) runs in one call of SESSION_S=560.
#
# Results in $OUT (8 files; vae_decode.txt too with PROBE=1): session.txt (the whole log, all calls), timing.txt
# (what took how long, all calls), summary.txt (lab/device/ladder_summary.py: verdicts, estimates, wall time per
# phase and the phase totals, the kept chain's speed-up), ledger.tsv, profiles.txt (each profile's table), ladder.tgz (summary.json,
# the ledger, every experiment.json and perf.json, profile JSONs, status, `dit-ar summary --markdown --time`: each
# experiment's phases, the HTML report),
# clocks.csv (SM clock, its maximum, power; this call), env.txt (this call's machine and software).
#
# Knobs: CHECK=1 first runs tests/e2e/test_gpu_ladder_cuda.py (patch 05's sampling graph against the hand-graphed
# best of 01-04, for fresh seeds and between allocations, the profile's clock and replica FLOP count on this GPU;
# patch 08 against the best of 01-07 under the numerical gate, for fresh seeds and classes; at most 420 s, once per
# session); PROBE=1 then runs lab/probes/vae_decode_gpu.py (about 90 s: the decode as
# fp32, bf16, bf16 channels-last and bf16 compiled, eager and graphed, against fp32; $OUT/vae_decode.txt; once per
# session); ONLY="04,05" judges only those steps; NOOP=1 then judges a commit that changes one comment against the
# best (once a session: a no-op DISCARD's phases); WARM=1 turns the lane's performance.warm_servers on and waits,
# before each step, until the servers the previous run started are ready (the time an agent spends between runs;
# a resumed call first starts them again, since the last call's end stopped them);
# START="01,02" folds those patches into the starting commit (a session that starts later in the ladder, e.g. on
# a fresh machine; its chain starts there); PROFILE_AFTER; STEPS; ROUNDS; SCRATCH (default /tmp/ladder); FRESH=1
# discards an earlier session in SCRATCH; LANE=embedded-cpu rehearses the whole flow on this machine's CPU (no
# wheels; every patch is a no-op on the CPU lane, so each step is judged as one).
# PLAN="noop1 01 slow1 02 qfail ..." judges these items in order instead of the patches alone: NN is a patch of
# examples/gpu-ladder/patches, noopK a one-comment commit, slowK a real slowdown (SLOW_MS, default 15, ms of sleep
# before each generate), qfail the images' contrast cut by a fifth, declared numerical (it fails the fidelity
# floors on every lane); each item's description is its own, so a resumed call skips what the ledger holds.
# ROUNDS=lane keeps the lane's rounds. CALIBRATE_AFTER=NN (or "baseline") runs `dit-ar calibrate` (CALIBRATE_PAIRS A/A pairs, default
# 6, within CALIBRATE_S seconds, default 150) on the best once item NN is judged: the machine's profile then
# replaces the prior offset bound for the later experiments (lab/notebook/gpu-night.md). REVALIDATE=end sets the
# lane's revalidate_every to 0 and runs `dit-ar revalidate` once after the plan (the session's wall still counts it).
# lab/device/night.sh is the night in miniature built on it.
set -u
start=$(date +%s)
here="$(cd "$(dirname "$0")" && pwd)"; src="$(cd "$here/../.." && pwd)"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
lane="${LANE:-dit-xl2-256}"; scratch="${SCRATCH:-/tmp/ladder}"; project="$scratch/project"; keep="$scratch/out"
if [ "${SESSION_S:-530}" -gt 570 ]; then
  echo "SESSION_S=$SESSION_S leaves the summary no time before the run tool's 600 s limit: use at most 570" >&2; exit 2
fi
deadline="${DEADLINE:-$(( start + ${SESSION_S:-530} ))}"
min_left="${MIN_LEFT:-120}"; min_left_compile="${MIN_LEFT_COMPILE:-170}"
if [ "$lane" = embedded-cpu ]; then steps="${STEPS:-}"; else steps="${STEPS:-8}"; fi
rounds="${ROUNDS:-8}"
[ -n "${FRESH:-}" ] && rm -rf "$scratch"
mkdir -p "$keep"
log="$keep/session.txt"; times="$keep/timing.txt"
left() { echo $(( deadline - $(date +%s) )); }
stamp() { echo "$(date -u +%H:%M:%S) +$(( $(date +%s) - start )) s  $*" | tee -a "$times"; }
dit() { python3 -m pytest_dit_ar.cli --config config/autoresearch.json "$@"; }
picked() { case ",${1// /,}," in *",${2%%-*},"*) return 0;; esac; return 1; }  # picked LIST NN-name
wait_warm() {  # WARM=1: wait (at most 150 s) until the warm fork servers the last run started said hello
  [ -n "${WARM:-}" ] || return 0
  local t0; t0=$(date +%s)
  while [ $(( $(date +%s) - t0 )) -lt 150 ]; do
    python3 -c 'import json, sys; sys.exit(0 if json.load(open(".autoresearch/warm-servers.json"))["servers"] else 1)' \
      2>/dev/null && { stamp "warm servers ready after $(( $(date +%s) - t0 )) s of waiting"; return 0; }
    [ -f .autoresearch/warm-servers.json ] || { stamp "no warm servers (see .autoresearch/warm/keeper.log)"; return 0; }
    sleep 1
  done
  stamp "warm servers not ready after 150 s"
}
warm_again() {  # WARM=1, a resumed call: start the next experiment's keeper (the last call's end stopped it)
  [ -n "${WARM:-}" ] && [ ! -f .autoresearch/warm-servers.json ] || return 0
  python3 -c 'import sys; from pathlib import Path; from pytest_dit_ar.loop.speed.warm_servers import open_session, start_next
config = Path("config/autoresearch.json"); print(start_next(open_session(config, sys.argv[1]), config))' "$lane" \
    2>&1 | sed 's/^/warm servers started again: keeper pid /' >> "$log"
}
echo "=== call at $(date -u '+%Y-%m-%d %H:%M:%S') UTC, lane $lane, deadline in $(left) s" >> "$log"
stamp "call starts (lane $lane, scratch $scratch)"

setup_machine() {  # wheels, bubblewrap, environment, $OUT/env.txt, UNSANDBOXED (as lab/device/gpu_env.sh)
  if [ "$lane" = embedded-cpu ]; then
    export PYTHONPATH="$src" PYTHONUNBUFFERED=1
  else
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "$src"/.whl/*.whl || { echo "the wheels in .whl/ did not install: carry .whl" >&2; exit 2; }
    dpkg -x "$src"/.whl/deb/bubblewrap_*.deb /tmp/bw
    export PATH="/tmp/bw/usr/bin:$PATH" PYTHONPATH="/tmp/site:$src" PYTEST_PLUGINS=pytest_dit_ar.plugin \
      PYTHONUNBUFFERED=1
  fi
  { command -v nvidia-smi >/dev/null && nvidia-smi; git --version; nproc; command -v bwrap && bwrap --version
    python3 -c "import sys, torch, diffusers; print(sys.version.split()[0], torch.__version__, diffusers.__version__)"
    python3 -c "from pytest_dit_ar.worker.sandbox import available; print('sandbox problem:', available())"
  } > "$OUT/env.txt" 2>&1
  if ! python3 -c "from pytest_dit_ar.worker.sandbox import available; import sys; sys.exit(available() is not None)"
  then export UNSANDBOXED=1; echo "sandbox unavailable: running unsandboxed" >> "$OUT/env.txt"; fi
  if [ "$lane" != embedded-cpu ]; then  # the zygote's prelude must leave CUDA alone with the compile stack loaded
    PYTORCH_NVML_BASED_CUDA_CHECK=1 python3 -c "import torch, torch._dynamo, torch._inductor.compile_fx, sys; \
sys.exit(torch.cuda.is_initialized())" >> "$OUT/env.txt" 2>&1 || {
      echo "compile stack initialises CUDA here: preloading it is switched off for this run" >> "$OUT/env.txt"
      sed -i 's/^COMPILE_PRELOAD = .*/COMPILE_PRELOAD: tuple = ()/' "$src/pytest_dit_ar/worker/zygote.py"; }
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
      --format=csv -lms 1000 > "$OUT/clocks.csv" 2>/dev/null &
    smi=$!
  fi
}

setup_project() {  # a fresh repository holding the source tree, the lane's steps and rounds set; init
  rm -rf "$project"; mkdir -p "$project"
  (cd "$src" && tar cf - --exclude=./.git --exclude=./.autoresearch --exclude=./.venv --exclude=./.whl \
    --exclude=./docs/data --exclude=./lab/data .) | (cd "$project" && tar xf -)
  cd "$project" || exit 2
  git init -q -b main; git config user.name "dit-ar gpu ladder"; git config user.email "ladder@dit-ar.invalid"
  python3 - "$lane" "$steps" "$rounds" "${WARM:-}" "$([ "${REVALIDATE:-}" = end ] && echo 1)" <<'PY'
import json, sys
path = "config/autoresearch.json"
cfg = json.load(open(path))
lane = cfg["lanes"][sys.argv[1]]
if sys.argv[2]:
    lane["steps"] = int(sys.argv[2])
if sys.argv[3] != "lane":  # ROUNDS=lane keeps the lane's own
    lane.setdefault("performance", {})["rounds"] = int(sys.argv[3])
if sys.argv[4]:  # WARM=1: the quality run's pair is forked from the servers the last run started
    lane["performance"]["warm_servers"] = True
if sys.argv[5]:  # REVALIDATE=end: no re-validation inside `dit-ar experiment`; one at the session's end
    lane.setdefault("performance", {})["revalidate_every"] = 0
json.dump(cfg, open(path, "w"), indent=2)
PY
  for patch in "$src"/examples/gpu-ladder/patches/*.patch; do
    if picked "${START:-}" "$(basename "$patch")"; then git apply "$patch" || exit 2; fi
  done
  git add -A && git commit -qm "GPU ladder: $lane at ${steps:-default} steps, $rounds rounds${START:+, from patches $START}"
  { dit doctor; dit init --tag ladder --lane "$lane"; } >> "$log" 2>&1 || { stamp "init failed"; exit 2; }
  stamp "project ready"
}

baseline() {
  [ "$(left)" -ge "$min_left_compile" ] || { stamp "baseline: not started ($(left) s left)"; return 1; }
  timeout $(( $(left) - 15 )) python3 -m pytest_dit_ar.cli --config config/autoresearch.json baseline --quiet \
    ${UNSANDBOXED:+--unsandboxed} >> "$log" 2>&1 || { stamp "baseline failed or stopped by the deadline"; return 1; }
  stamp "baseline done: $(grep -P '\tbaseline\t' .autoresearch/results.tsv | tail -n 1 | cut -f11) ms"
}

profile_best() {  # profile_best TAG: `dit-ar profile` of the current best, JSON and table kept
  [ "$(left)" -ge 90 ] || { stamp "profile $1: not started, the deadline is too close"; return 0; }
  [ -f "$keep/profile-$1.json" ] && return 0
  local t0 same; t0=$(date +%s)
  same="$(grep -l "\"commit\": \"$(git rev-parse HEAD | cut -c1-10)\"" "$keep"/profile-*.json 2>/dev/null | head -1)"
  if [ -n "$same" ]; then  # the best did not move since that profile
    cp "$same" "$keep/profile-$1.json"; stamp "profile after $1: the best is the one $(basename "$same") profiled"
    return 0
  fi
  timeout $(( $(left) - 10 )) python3 -m pytest_dit_ar.cli --config config/autoresearch.json profile --json \
    > "$keep/profile-$1.json" 2>> "$log" || { stamp "profile $1 failed"; rm -f "$keep/profile-$1.json"; return 0; }
  { echo "=== profile after $1 (commit $(git rev-parse --short HEAD))"
    python3 -c "import json, sys; from perf_suite.profiling import format_table; \
print('\n'.join(format_table(json.load(open(sys.argv[1])))))" "$keep/profile-$1.json"; echo; } >> "$keep/profiles.txt"
  stamp "profile after $1: $(( $(date +%s) - t0 )) s"
}

finish() {  # status, summary, report and the returned files
  dit status --rows 30 > "$keep/status.txt" 2>&1
  dit summary --markdown --time --out "$keep/summary.md" >> "$log" 2>&1
  [ "$(left)" -ge 20 ] && dit report >> "$log" 2>&1
  python3 "$src/lab/device/ladder_summary.py" "$project" "$keep/summary.json" > "$keep/summary.txt" 2>&1
  local files=()
  for f in .autoresearch/runs/*/experiment.json .autoresearch/runs/*/perf.json .autoresearch/runs/*/baseline.json; do
    [ -f "$f" ] && mkdir -p "$keep/runs" && cp "$f" "$keep/runs/$(basename "$(dirname "$f")")-$(basename "$f")"
  done
  cp .autoresearch/results.tsv "$keep/ledger.tsv"
  [ -d .autoresearch/report ] && [ "$(du -sm .autoresearch/report | cut -f1)" -lt 12 ] && \
    rm -rf "$keep/report" && cp -r .autoresearch/report "$keep/report"
  for f in "$keep"/profile-*.json "$keep"/status.txt "$keep"/summary.md "$keep"/summary.json "$keep"/ledger.tsv \
    "$keep"/runs "$keep"/report; do
    [ -e "$f" ] && files+=("$(basename "$f")")
  done
  tar czf "$OUT/ladder.tgz" -C "$keep" "${files[@]}"
  cp "$keep/summary.txt" "$keep/ledger.tsv" "$OUT/" 2>/dev/null
  [ -f "$keep/profiles.txt" ] && cp "$keep/profiles.txt" "$OUT/"
}

calibrate_best() {  # CALIBRATE_AFTER=NN: `dit-ar calibrate` on the best once that item is judged (once a session)
  [ -f "$keep/calibrated" ] && return 0
  [ "$(left)" -ge "${CALIBRATE_S:-150}" ] || { stamp "calibrate after $1: not started ($(left) s left)"; return 0; }
  local t0; t0=$(date +%s)
  timeout $(( $(left) - 20 )) python3 -m pytest_dit_ar.cli --config config/autoresearch.json calibrate \
    --pairs "${CALIBRATE_PAIRS:-6}" --budget-s "${CALIBRATE_S:-150}" ${UNSANDBOXED:+--unsandboxed} >> "$log" 2>&1 \
    && touch "$keep/calibrated"
  stamp "calibrate after $1: $([ -f "$keep/calibrated" ] && echo done || echo FAILED, see session.txt) in $(( $(date +%s) - t0 )) s"
}
noop_step() {  # NOOP=1: a commit that changes one comment, judged against the best once a session
  local desc="a no-op against the best (one comment, NOOP=1)" t0 row
  cut -f16 "$ledger" | grep -qxF -- "$desc" && return 0
  [ "$(left)" -ge "$min_left" ] || { stamp "no-op: not started ($(left) s left)"; return 0; }
  printf '\n# a comment: nothing changes\n' >> model_under_test/__init__.py
  git commit -qam "$desc"
  wait_warm
  echo "=== no-op: $desc  [$(date -u +%H:%M:%S)]" >> "$log"
  t0=$(date +%s)
  timeout $(( $(left) - 15 )) python3 -m pytest_dit_ar.cli --config config/autoresearch.json experiment \
    --classification exact --description "$desc" ${UNSANDBOXED:+--unsandboxed} >> "$log" 2>&1
  row="$(tail -n 1 "$ledger")"
  stamp "no-op: $(echo "$row" | cut -f6) $(echo "$row" | cut -f12)% in $(( $(date +%s) - t0 )) s"
  stamp "  phases: $(grep -a '^time: ' "$log" | tail -n 1 | cut -c7-)"
}

setup_machine
stamp "machine ready (wheels, sandbox check)"
if [ -n "${CHECK:-}" ] && [ ! -f "$keep/check.done" ]; then  # the sampling graph and the profile on this GPU first
  (cd "$src" && timeout 420 python3 -m pytest -q -s -p no:cacheprovider -m cuda tests/e2e/test_gpu_ladder_cuda.py) \
    >> "$log" 2>&1 && touch "$keep/check.done"
  stamp "check (tests/e2e/test_gpu_ladder_cuda.py): $([ -f "$keep/check.done" ] && echo passed || echo FAILED, see session.txt)"
fi
if [ -n "${PROBE:-}" ] && [ "$lane" != embedded-cpu ] && [ ! -f "$keep/vae_decode.txt" ] && [ "$(left)" -ge 150 ]
then  # the decode, four ways (needs up to 4 minutes: the compiled decoder compiles once)
  (cd "$src" && timeout $(( $(left) > 300 ? 240 : $(left) - 60 )) python3 -m lab.probes.vae_decode_gpu --profile) \
    > "$keep/vae_decode.part" 2>&1 && mv "$keep/vae_decode.part" "$keep/vae_decode.txt"
  stamp "probe (lab/probes/vae_decode_gpu.py): $([ -f "$keep/vae_decode.txt" ] && echo done || echo FAILED, see vae_decode.part)"
  cp "$keep"/vae_decode.* "$OUT/" 2>/dev/null
fi
ledger="$project/.autoresearch/results.tsv"
if [ -f "$ledger" ] && grep -qP '\tbaseline\t' "$ledger"; then
  cd "$project" || exit 2
  stamp "resuming the session in $project"
  # an experiment stopped mid-way leaves its candidate commit: go back to the recorded best
  best="$(dit status --json | python3 -c 'import json, sys; b = json.load(sys.stdin)["best"]; print(b["ref"] or b["commit"])')"
  git reset -q --hard "$best" && git clean -qfd model_under_test
  dit recover >> "$log" 2>&1
  warm_again  # the last call's end stopped the keeper: start it now, so the call's first experiment adopts
else
  if [ -f "$project/.autoresearch/session.json" ]; then cd "$project" || exit 2; else setup_project; fi
  baseline || { finish; cp "$log" "$OUT/session.txt"; cp "$times" "$OUT/timing.txt"; exit 1; }
  if picked "${CALIBRATE_AFTER:-}" baseline; then calibrate_best baseline; fi
fi
patch_of() { ls "$src"/examples/gpu-ladder/patches/"$1"-*.patch 2>/dev/null | head -1; }  # patch_of NN
# One plan item: its class, description and the change it commits (judge_item ITEM). Items: NN (a patch of
# examples/gpu-ladder/patches), noopK (one comment), slowK (a sleep of SLOW_MS ms before each generate: a real
# slowdown), qfail (the images' contrast cut by a fifth, declared numerical: fails the fidelity floors on every lane).
item_class() {
  case "$1" in noop*) echo exact;; slow*) echo exact;; qfail) echo numerical;;
    *) basename "$(patch_of "$1")" .patch | cut -d- -f2;; esac
}
item_desc() {
  case "$1" in
    noop*) echo "a no-op against the best (one comment, ${1#noop})";;
    slow*) echo "a slowdown: ${SLOW_MS:-15} ms of sleep before each generate (${1#slow})";;
    qfail) echo "the images' contrast cut by a fifth, declared numerical (a quality failure)";;
    *) sed -n 's/^Subject: //p' "$(patch_of "$1")" | head -1;;
  esac
}
item_apply() {
  case "$1" in
    noop*) printf '\n# a comment: nothing changes (%s)\n' "$1" >> model_under_test/__init__.py;;
    slow*) python3 -c "import sys; from pytest_dit_ar.loop.speed.patching import sleep_patch
sys.stdout.write(sleep_patch(${SLOW_MS:-15} / 1000.0, tag='$1'))" >> model_under_test/__init__.py;;
    qfail) python3 -c "import sys; from pytest_dit_ar.loop.speed.patching import wrap_generate
sys.stdout.write(wrap_generate('qfail', 'out = _gen(requests)\nout.images = out.images * 0.8 + 0.1\nreturn out'))" \
      >> model_under_test/__init__.py;;
    *) git apply "$(patch_of "$1")";;
  esac
}
judge_item() {  # judge_item ITEM: one `dit-ar experiment`; returns 1 when the deadline stops the plan
  local item="$1" cls desc need t0 row
  cls="$(item_class "$item")"; desc="$(item_desc "$item")"
  if [ -z "$cls" ] || [ -z "$desc" ]; then stamp "$item: no such plan item"; return 0; fi
  if cut -f16 "$ledger" | grep -qxF -- "$desc"; then
    picked "${PROFILE_AFTER-04 end}" "$item" && profile_best "$item"
    picked "${CALIBRATE_AFTER:-}" "$item" && calibrate_best "$item"  # a resumed call: a calibration that failed
    return 0
  fi
  need="$min_left"
  case "$item" in [0-9][0-9]) grep -q '^+.*\.compile(' "$(patch_of "$item")" && need="$min_left_compile";; esac
  if [ "$(left)" -lt "$need" ]; then stamp "$item: not started ($(left) s left); the plan stops here"; return 1; fi
  item_apply "$item" || { stamp "$item: the change does not apply to the best"; return 0; }
  git add -A model_under_test && git commit -qm "$desc"
  wait_warm
  echo "=== $item ($cls): $desc  [$(date -u +%H:%M:%S)]" >> "$log"
  t0=$(date +%s)
  timeout $(( $(left) - 15 )) python3 -m pytest_dit_ar.cli --config config/autoresearch.json experiment \
    --classification "$cls" --description "$desc" ${UNSANDBOXED:+--unsandboxed} >> "$log" 2>&1
  row="$(tail -n 1 "$ledger")"
  if [ "$(echo "$row" | cut -f16)" != "$desc" ]; then
    stamp "$item: stopped by the deadline after $(( $(date +%s) - t0 )) s (nothing recorded)"; return 1
  fi
  [ "$(echo "$row" | cut -f6)" = keep ] && rm -f "$keep/profile-end.json"  # the best moved: profile it again
  stamp "$item: $(echo "$row" | cut -f6) $(echo "$row" | cut -f12)% ($(echo "$row" | cut -f10) -> $(echo "$row" | cut -f11) ms) in $(( $(date +%s) - t0 )) s"
  stamp "  phases: $(grep -a '^time: ' "$log" | tail -n 1 | cut -c7-)"
  picked "${PROFILE_AFTER-04 end}" "$item" && profile_best "$item"
  picked "${CALIBRATE_AFTER:-}" "$item" && calibrate_best "$item"
  return 0
}
revalidate_end() {  # REVALIDATE=end: `dit-ar revalidate` once, after the plan (the lane's revalidate_every is 0)
  [ -f "$keep/revalidated" ] && return 0
  [ "$(left)" -ge 150 ] || { stamp "revalidate: not started ($(left) s left)"; return 0; }
  local t0; t0=$(date +%s)
  timeout $(( $(left) - 20 )) python3 -m pytest_dit_ar.cli --config config/autoresearch.json revalidate \
    ${UNSANDBOXED:+--unsandboxed} >> "$log" 2>&1 && touch "$keep/revalidated"
  stamp "revalidate at the end: $([ -f "$keep/revalidated" ] && echo done || echo FAILED, see session.txt) in $(( $(date +%s) - t0 )) s"
}
plan="${PLAN:-$(for p in "$src"/examples/gpu-ladder/patches/*.patch; do basename "$p" | cut -c1-2; done)}"
for item in $plan; do
  if [ -n "${ONLY:-}" ] && ! picked "$ONLY" "$item"; then continue; fi
  if picked "${START:-}" "$item"; then continue; fi
  judge_item "$item" || { stopped=1; break; }
done
[ -n "${NOOP:-}" ] && [ -z "${stopped:-}" ] && noop_step
[ "${REVALIDATE:-}" = end ] && [ -z "${stopped:-}" ] && revalidate_end
[ -z "${stopped:-}" ] && case " ${PROFILE_AFTER-04 end} " in *" end "*) profile_best end;; esac
finish
[ -n "${smi:-}" ] && kill "$smi" 2>/dev/null
[ -n "${WARM:-}" ] && python3 -c 'from pathlib import Path; from pytest_dit_ar.loop.speed.warm_servers import stop
from pytest_dit_ar.state.paths import StatePaths; print(stop(StatePaths(Path.cwd())) or "none")' 2>&1 | \
  sed 's/^/warm servers stopped: /' >> "$log"  # nothing of the session outlives the call
stamp "call ends"
cp "$log" "$OUT/session.txt"; cp "$times" "$OUT/timing.txt"
