# Sourced by the graphed-best scripts of lab/device/ (calibrate.sh, true_win_and_noops.sh): sets start, OUT,
# lane, patches and steps. DEVICE=cpu rehearses on this machine's CPU (the embedded-cpu lane, no patches); else
# the H200 set-up (lab/device/gpu_env.sh) and the check that the zygote's prelude leaves CUDA alone with the
# compile stack imported (as ladder.sh checks). Knobs: LANE / STEPS / PATCHES (numbers of
# examples/h200-session/patches/; `hand` names the hand-captured CUDA graphs of examples/cuda-graphs/).
patch_file() {  # patch_file NN|hand: the patch file a PATCHES entry names
  if [ "$1" = hand ]; then echo "$src/examples/cuda-graphs/cuda-graphs.patch"
  else ls "$src"/examples/h200-session/patches/"$1"-*.patch; fi
}
if [ "${DEVICE:-cuda}" = cpu ]; then
  start=$(date +%s); OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"; export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
  lane="${LANE:-embedded-cpu}"; patches="${PATCHES:-}"; steps="${STEPS:-}"
else
  . lab/device/gpu_env.sh  # wheels, bubblewrap, environment, $OUT/env.txt, UNSANDBOXED
  lane="${LANE:-dit-xl2-256}"; patches="${PATCHES-01 04 07 06}"; steps="${STEPS:-8}"
  PYTORCH_NVML_BASED_CUDA_CHECK=1 python3 -c "import torch, torch._dynamo, torch._inductor.compile_fx, sys; \
sys.exit(torch.cuda.is_initialized())" >> "$OUT/env.txt" 2>&1 || {
    echo "compile stack initialises CUDA here: preloading it is switched off for this run" >> "$OUT/env.txt"
    sed -i 's/^COMPILE_PRELOAD = .*/COMPILE_PRELOAD: tuple = ()/' pytest_dit_ar/worker/zygote.py; }
fi
