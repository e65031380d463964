#!/usr/bin/env bash
# PixArt-Sigma-1024 judged as on a 24 GB card, and a scaffolded full-size PixArt folder, on the H200:
#   TOTAL_S=530 bash lab/device/pixart_24gb.sh   (kind nvidia-h200, or -x2: then each
# part gets a GPU of its own and they run side by side; on one GPU part A runs first, then part B).
# Part A, $OUT/pixart24/emulated/: pixart-sigma-1024 judged as on a 24 GB card (guardrails.emulated_vram_gb = 24:
#   the budget holds for the SUM of live workers, so two 18.8 GB workers run one side at a time), 4 steps,
#   6 rounds, sandboxed. Its starting commit evaluates one wasted transformer pass per step (a known, exact
#   cost); the commit removing the wasted pass (outputs
#   unchanged: exact) must be KEEP, then a no-op commit (a comment) against it DISCARD-PERFORMANCE. The summary shows the segments' layouts (alternate) and each side's peak.
# Part B, $OUT/pixart24/scaffold/: a full-size PixArt-Sigma pipeline folder with random weights
#   (lab/device/pixart_folder.py: 0.6 B transformer, T5-XXL-sized encoder, tokenizer built offline,
#   save_pretrained) through the README's flow in a fresh git repository: `dit-ar scaffold --pipeline`,
#   commit, `doctor`, `init`, `baseline`, one `experiment` (a comment: expected DISCARD-PERFORMANCE).
# lab/notebook/h200-research-sessions.md ("Wave 6") has what ran. Knobs: TOTAL_S (default 235), PARTS ("a b"), TINY=1 / DEVICE=cpu (the
# CPU rehearsal of part B's flow with the tests' tiny pipeline; part A needs CUDA and is skipped on a CPU).
set -u
if [ -z "${DEVICE:-}" ] || [ "${DEVICE}" != cpu ]; then
  . lab/device/gpu_env.sh  # wheels, bubblewrap, environment, $OUT/env.txt, UNSANDBOXED
else
  start=$(date +%s); OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"; export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
fi
src="$PWD"; dir="$OUT/pixart24"; mkdir -p "$dir/emulated" "$dir/scaffold"
total="${TOTAL_S:-235}"
left() { echo $(( total - ($(date +%s) - start) )); }
dit() { timeout "$(( $(left) - 3 ))" python3 -m pytest_dit_ar.cli "$@"; }
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
gpu_b=$([ "$gpus" -ge 2 ] && echo 1 || echo 0)

fresh_copy() {  # fresh_copy DIR: the project's source tree as a new git repository (as replay.sh does)
  mkdir -p "$1" && (cd "$src" && tar cf - --exclude=./.git --exclude=./.autoresearch --exclude=./.venv \
    --exclude=./.whl --exclude=./.h200state .) | (cd "$1" && tar xf -)
  (cd "$1" && git init -q -b main && git config user.name "dit-ar wave4" && git config user.email "w4@dit-ar.invalid")
}

part_a() {
  local repo=/tmp/wave4-pixart24/project
  fresh_copy "$repo"; cd "$repo" || return
  python3 - <<'PY'
import json
path = "config/autoresearch.json"
cfg = json.load(open(path))
lane = cfg["lanes"]["pixart-sigma-1024"]
lane["steps"] = 4
lane.setdefault("performance", {}).update(rounds=6, warmup_rounds=2, max_segments=4, cpu_affinity=[2, 3])
lane.setdefault("guardrails", {})["emulated_vram_gb"] = 24
json.dump(cfg, open(path, "w"), indent=2)
p = "model_under_test/pipeline.py"
text = open(p).read()
old = "                ).sample.float()\n                if cfg:  # one batched pass"
assert text.count(old) == 1, "the PixArt denoiser call moved: update lab/device/pixart_24gb.sh"
waste = ("                ).sample.float()\n                self.transformer(model_input.to(dtype), encoder_hidden_states=embeds, "
         "encoder_attention_mask=mask, timestep=self._timestep_batch(t, model_input.shape[0]), "
         "added_cond_kwargs={\"resolution\": None, \"aspect_ratio\": None})  # WASTED PASS\n"
         "                if cfg:  # one batched pass")
open(p, "w").write(text.replace(old, waste))
PY
  git add -A && git commit -qm "wave 4: pixart-sigma-1024 at 4 steps on an emulated 24 GB card; one wasted transformer pass per step"
  dit --config config/autoresearch.json init --tag w4 --lane pixart-sigma-1024 || return
  dit --config config/autoresearch.json baseline --quiet ${UNSANDBOXED:+--unsandboxed} || return
  # the exact win first (never measured on the H200 before wave 6's second call), then a no-op against it
  sed -i '/# WASTED PASS$/d' model_under_test/pipeline.py
  git commit -qam "drop the wasted transformer pass"
  echo "=== exact win [$(date -u +%H:%M:%S)]"
  dit --config config/autoresearch.json experiment --classification exact \
    --description "drop the wasted transformer pass" ${UNSANDBOXED:+--unsandboxed} 2>&1 | tail -n 20
  echo "# a comment changes nothing" >> model_under_test/pipeline.py
  git commit -qam "no-op: a comment"
  echo "=== no-op [$(date -u +%H:%M:%S)]"
  dit --config config/autoresearch.json experiment --classification exact --description "no-op: a comment" \
    ${UNSANDBOXED:+--unsandboxed} 2>&1 | tail -n 20
}

part_b() {
  local repo=/tmp/wave4-scaffold/project weights=/tmp/wave4-scaffold/pixart-sigma
  mkdir -p "$repo" && cd "$repo" || return
  git init -q -b main && git config user.name "dit-ar wave4" && git config user.email "w4@dit-ar.invalid"
  python3 "$src/lab/device/pixart_folder.py" "$weights" ${TINY:+--tiny} ${DEVICE:+--device "$DEVICE"} || return
  dit scaffold --pipeline "$weights" --steps 4 --cases 4 ${DEVICE:+--device "$DEVICE"} || return
  # as root the workers run as nobody, and save_pretrained writes its safetensors 0600: the fix scaffold prints
  [ "$(id -u)" = 0 ] && chmod -R a+rX "$weights"
  python3 - "${DEVICE:-cuda}" <<'PY'
import json, sys
path = "config/autoresearch.json"
cfg = json.load(open(path))
for lane in cfg["lanes"].values():
    lane.setdefault("performance", {}).update(rounds=6, max_segments=3)
    if sys.argv[1] != "cpu":
        lane["performance"]["cpu_affinity"] = [8, 9]
json.dump(cfg, open(path, "w"), indent=2)
PY
  git add -A && git commit -qm "Set up dit-ar" || return
  dit doctor
  dit init --tag first || return
  dit baseline --quiet ${UNSANDBOXED:+--unsandboxed} || return
  echo "# a comment changes nothing" >> model_under_test/__init__.py
  git commit -qam "no-op: a comment"
  echo "=== scaffolded experiment [$(date -u +%H:%M:%S)]"
  dit experiment --classification exact --description "no-op: a comment" ${UNSANDBOXED:+--unsandboxed} 2>&1 | tail -n 20
  dit status
}

collect() {  # collect PROJECT DIR
  [ -d "$1/.autoresearch" ] || return
  cp "$1/.autoresearch/results.tsv" "$2/ledger.tsv"
  for f in "$1"/.autoresearch/runs/*/experiment.json "$1"/.autoresearch/runs/*/perf.json; do
    [ -f "$f" ] && cp "$f" "$2/$(basename "$(dirname "$f")")-$(basename "$f")"
  done
  python3 "$src/lab/device/session_summary.py" "$1" "$2/summary.json" > "$2/summary.txt" 2>&1
}

# PARTS picks the parts (default "a b"). On two GPUs they run side by side, a GPU each; on one GPU one after the
# other: each takes the GPU lock of its session's card, so a second one beside it is refused (wave 6, call 3:
# part B's baseline said "another experiment is using GPU 0").
parts="${PARTS:-a b}"
[ "${DEVICE:-cuda}" = cpu ] && parts="${parts//a/}"
run_a() { ( export CUDA_VISIBLE_DEVICES=0; part_a ) > "$dir/emulated/session.txt" 2>&1; }
run_b() { ( export CUDA_VISIBLE_DEVICES=$gpu_b; part_b ) > "$dir/scaffold/session.txt" 2>&1; }
if [ "$gpus" -ge 2 ]; then
  for p in $parts; do "run_$p" & done
  wait
else
  for p in $parts; do "run_$p"; done
fi
collect /tmp/wave4-pixart24/project "$dir/emulated"
collect /tmp/wave4-scaffold/project "$dir/scaffold"
echo "total $(( $(date +%s) - start )) s" >> "$OUT/env.txt"
