#!/usr/bin/env bash
# The sandbox on a GPU machine (kind nvidia-h200, one GPU), about 500 s (not yet run: the H200 row of
# lab/notebook/security-measurements.md's freeze cost waits for it; read its output before trusting it):
#   bash lab/device/sandbox_gpu.sh
# Writes under "$OUT/security/":
#   doctor.txt       what the sandbox uses there (user, seccomp, cgroup hierarchies);
#   freeze_cost.txt  lab/tools/freeze_cost.py: freeze waits, cgroup freezer and SIGSTOP fallback, idle and in-kernel
#                    work (docs/design/sandbox-and-security.md "What a freeze costs" wants an H200 row);
#   gpu_worker.txt   one sandboxed worker of the embedded model on cuda:0 (the allow-list root must still give
#                    CUDA what it needs): build, three generates, the worker's uid, the freeze waits, the
#                    sampled host and device memory (NVML every 100 ms);
#   attacks.txt      the round-3 worker-level attack tests of tests/e2e/test_attacks.py (CPU, as root).
# Needs in .whl/ what lab/device/gpu_env.sh says.
set -u
. lab/device/gpu_env.sh  # wheels, bubblewrap, environment, $OUT/env.txt, UNSANDBOXED
mkdir -p "$OUT/security"
python3 -m pytest_dit_ar.cli doctor > "$OUT/security/doctor.txt" 2>&1
timeout 150 python3 -m lab.tools.freeze_cost > "$OUT/security/freeze_cost.txt" 2>&1
timeout 200 python3 - > "$OUT/security/gpu_worker.txt" 2>&1 <<'EOF'
import time
from pathlib import Path
from dit_ar_contract.device import DeviceIdentity, LaneTarget
from pytest_dit_ar.worker import sandbox
from pytest_dit_ar.worker.client import SandboxPolicy, WorkerProcess

root = Path.cwd()
print("sandbox problem:", sandbox.available(), "privileged:", sandbox.privileged())
target = LaneTarget(lane="embedded-cuda", lane_id="embedded-cuda", device="cuda:0", identity=DeviceIdentity("cuda"),
                    on_target=False)
worker = WorkerProcess("candidate", root, target, 4, Path("/tmp/security-gpu-worker.log"), 180.0,
                       SandboxPolicy(hide=(root / ".git",), gpu=True, expose=(root,)))
t0 = time.perf_counter()
worker.start()
spec = {"root": str(sandbox.MOUNT), "lane": "embedded-cuda", "preset": "embedded-digits",
        "weights": str(root / "assets" / "embedded-digits"), "device": "cuda:0", "resolution": 32, "steps": 8,
        "guidance": 3.0, "batch": 4, "options": {}, "gpus": 1}
worker.request("build", spec=spec)
print(f"started and built in {time.perf_counter() - t0:.2f} s")
for i in range(3):
    g = worker.generate([["7", i], ["3", i + 1], ["1", i + 2], ["0", i + 3]], resolution=32)
    print(f"generate {i}: {g.seconds * 1e3:.1f} ms, images {list(g.images.shape)}")
uid = [line for line in Path(f"/proc/{worker.processes()[-1]}/status").read_text().splitlines()
       if line.startswith("Uid:")]
print("worker", uid, "cgroup", worker.group)
print("freeze waits ms:", [round(w * 1e3, 3) for w in worker.freeze_waits])
print("peak host MB (sampled):", worker.peak_host_mb(), "kernel peak MB:", worker.kernel_peak_mb())
print("peak GPU MB (sampled NVML):", worker.gpu_memory_mb())
worker.close()
print(Path("/tmp/security-gpu-worker.log").read_text()[-3000:])
EOF
timeout 240 python3 -m pytest tests/e2e/test_attacks.py -q -p no:cacheprovider \
  -k "cannot_read or never_answers or sigcont or freeze_waits or tmpfs_memfd or keeps_only" \
  > "$OUT/security/attacks.txt" 2>&1
echo "total $(( $(date +%s) - start )) s" >> "$OUT/env.txt"
