#!/usr/bin/env bash
# Fresh processes from fork servers, and clean rounds, on one H200, lane dit-xl2-256 at 8 steps; <= 150 s with the
# environment setup (the driver stops itself at 110 s, killed at 125 s). Ran on 2026-12-01:
# lab/data/h200/warm-start-ladder-20261201/call2/
#   bash lab/device/fork_servers_gpu.sh            # from the repository root; results in $OUT/forkserver/
# What it measures (lab/device/fork_servers_gpu.py, sandboxed unless the sandbox cannot start):
#   - cold: an exec'd worker pair's spawn-to-hello, build and ready time, started at the same moment as
#     the fork servers (2 a side); the fork servers' spawn-to-hello (the pool's ready time);
#   - 8 pairs forked from the fork servers: fork-to-hello (a fresh worker's ready time), build, then a
#     segment of 2 warm-up + 6 timed rounds in balanced order with the GPU watch: per round the order,
#     start/end times, idle wait and NVML SM clock, power, temperature, throttle reasons (forkserver.json);
#   - pairs alternate between both workers on core 2 and both on cores 2,3: the between-pair sd of the mean
#     log ratio and the per-round sd under each (4 pairs each), and one segment of the cold pair.
# Fills: docs/design/speed-verdict.md "Fork servers" and "Clean rounds" tables (H200 rows), lab/notebook/design-decisions.md 36.
set -u
. lab/device/gpu_env.sh  # wheels, bubblewrap, environment, $OUT/env.txt, UNSANDBOXED
mkdir -p "$OUT/forkserver"
timeout 125 python3 lab/device/fork_servers_gpu.py --lane dit-xl2-256 --steps 8 --pairs 8 --per-side 2 \
  --rounds 6 --warmup 2 --one 2 --two 2,3 --deadline-s 110 ${UNSANDBOXED:+--unsandboxed} \
  --out "$OUT/forkserver" > "$OUT/forkserver/forkserver.txt" 2>&1
echo "exit $? after $(( $(date +%s) - start )) s" >> "$OUT/forkserver/forkserver.txt"
