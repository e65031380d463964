# Sourced by the GPU scripts of lab/device/ (H200 or H100): installs the carried wheels and bubblewrap, sets the
# environment, writes $OUT/env.txt and exports UNSANDBOXED=1 when the sandbox cannot start there.
# Needs in .whl/: the wheels (diffusers, gitpython, gitdb, smmap, importlib_metadata, shtab) and
# deb/bubblewrap_*.deb (unpacked with dpkg -x: the machine has no bwrap).
start=$(date +%s)
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
dpkg -x .whl/deb/bubblewrap_*.deb /tmp/bw
export PATH="/tmp/bw/usr/bin:$PATH" PYTHONPATH="/tmp/site:$PWD" PYTEST_PLUGINS=pytest_dit_ar.plugin PYTHONUNBUFFERED=1
{ nvidia-smi; git --version; nproc; bwrap --version; python3 -c "import torch, diffusers; print(torch.__version__, diffusers.__version__)";
  python3 -c "from pytest_dit_ar.worker.sandbox import available; print('sandbox problem:', available())"; } > "$OUT/env.txt" 2>&1
if ! python3 -c "from pytest_dit_ar.worker.sandbox import available; import sys; sys.exit(available() is not None)"; then
  export UNSANDBOXED=1; echo "sandbox unavailable: running unsandboxed" >> "$OUT/env.txt"
fi
