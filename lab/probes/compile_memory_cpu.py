"""A sandboxed embedded-cpu worker (batch 4, 20 steps), eager or with its denoiser compiled: the harness's host
memory reading (cgroup anonymous + shared) after the build and after each generate, and the whole-life peak.

    python lab/probes/compile_memory_cpu.py /tmp/probe compile   (or: eager)
"""
import shutil, sys, time, random
from pathlib import Path
ROOT = Path(__file__).resolve().parents[2]
from dit_ar_contract.device import DeviceIdentity, LaneTarget
from pytest_dit_ar.worker.client import SandboxPolicy, WorkerLauncher
from pytest_dit_ar.worker.compile_cache import CompileCaches
tmp = Path(sys.argv[1]); shutil.rmtree(tmp, ignore_errors=True)
state = tmp / "project" / ".autoresearch"
caches = CompileCaches(state / "compile-cache")
tree = tmp / "project" / "cand"
shutil.copytree(ROOT / "model_under_test", tree / "model_under_test", ignore=shutil.ignore_patterns("__pycache__"))
if sys.argv[2] == "compile":
    p = tree / "model_under_test" / "embedded.py"
    t = p.read_text().replace("    return ClassConditionalPipeline(", "    pipe = ClassConditionalPipeline(")
    t += "\n    import torch\n    pipe.transformer = torch.compile(pipe.transformer)\n    return pipe\n"
    p.write_text(t)
target = LaneTarget("embedded-cpu", "embedded-cpu", "cpu", DeviceIdentity("cpu"), on_target=True)
launcher = WorkerLauncher(target, 1, 600.0, SandboxPolicy(hide=(state,), expose=(tmp / "project",)), caches)
w = launcher.worker("candidate", tree, tmp / "project" / "logs" / "w.log")
spec = {"root": str(launcher.model_root(tree)), "lane": "embedded-cpu", "preset": "embedded-digits",
        "weights": str(ROOT / "assets" / "embedded-digits"), "device": "cpu", "resolution": 32, "steps": 20,
        "guidance": 3.0, "batch": 4, "options": {}}
w.start(); w.request("build", spec=spec)
print("after build", w.memory.held_mb(), w.peak_host_mb())
for i in range(8):
    g = w.generate([["7", random.randrange(1000)] for _ in range(4)])
    print(i, f"{g.seconds:.3f}s held {w.memory.held_mb():.0f} peak {w.peak_host_mb():.0f}", g.rows_per_image)
w.close()
