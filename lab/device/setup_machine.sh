# The device machine's set-up for a lab/device script, sourced (`. lab/device/setup_machine.sh`; needs $src, $lane
# and $OUT): on a GPU lane the wheels of $src/.whl (the run tool must carry `.whl`: diffusers, gitpython, gitdb,
# smmap, importlib_metadata, shtab, rapidfuzz, deb/bubblewrap_*.deb) go to /tmp/site and bubblewrap to /tmp/bw;
# on LANE=embedded-cpu nothing is installed. Writes $OUT/env.txt, sets UNSANDBOXED where bubblewrap cannot run,
# and samples the GPU's clocks into $OUT/clocks.csv (its pid in $smi). The same steps as lab/device/ladder.sh.
setup_machine() {
  if [ "$lane" = embedded-cpu ]; then
    export PYTHONPATH="$src" PYTHONUNBUFFERED=1
  else
    if [ ! -f /tmp/site/.installed ]; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$src"/.whl/*.whl || { echo "the wheels in .whl/ did not install: carry .whl" >&2; exit 2; }
      dpkg -x "$src"/.whl/deb/bubblewrap_*.deb /tmp/bw && touch /tmp/site/.installed
    fi
    export PATH="/tmp/bw/usr/bin:$PATH" PYTHONPATH="/tmp/site:$src" PYTEST_PLUGINS=pytest_dit_ar.plugin \
      PYTHONUNBUFFERED=1
  fi
  { command -v nvidia-smi >/dev/null && nvidia-smi; git --version; nproc; command -v bwrap && bwrap --version
    python3 -c "import sys, torch, diffusers; print(sys.version.split()[0], torch.__version__, diffusers.__version__)"
    python3 -c "from pytest_dit_ar.worker.sandbox import available; print('sandbox problem:', available())"
  } > "$OUT/env.txt" 2>&1
  if ! python3 -c "from pytest_dit_ar.worker.sandbox import available; import sys; sys.exit(available() is not None)"
  then export UNSANDBOXED=1; echo "sandbox unavailable: running unsandboxed" >> "$OUT/env.txt"; fi
  smi=""
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
