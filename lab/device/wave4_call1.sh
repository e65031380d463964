#!/usr/bin/env bash
# Wave 4, first H200 call (issues 20 and 21): the harness-independent probes of lab/probes/wave4_probe.py.
#   bash lab/device/wave4_call1.sh        (needs .whl/ as lab/device/h200_env.sh says)
set -u
. lab/device/h200_env.sh
mkdir -p "$OUT"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 500 > "$OUT/clocks.csv" 2>&1 &
smi=$!
timeout 170 python3 lab/probes/wave4_probe.py mode > "$OUT/mode.txt" 2>&1
PYTORCH_NVML_BASED_CUDA_CHECK=1 timeout 100 python3 lab/probes/wave4_probe.py fork > "$OUT/fork.txt" 2>&1
COMPILE_TIMEOUT=150 timeout 330 python3 lab/probes/wave4_probe.py compile > "$OUT/compile.txt" 2>&1
kill $smi
echo "total $(( $(date +%s) - start )) s" >> "$OUT/env.txt"
