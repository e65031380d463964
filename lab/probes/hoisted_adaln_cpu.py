"""How far the GPU ladder's step 08 (every block's adaLN modulation once a generate) moves the outputs of the model
it is applied to, on this machine's CPU, for each path the step can run on.

Builds model_under_test/ with the ladder's patches up to 03, 04 or 07, with and without 08, in a scratch folder
(examples/gpu-ladder/patches as they are), and generates the same requests with both: the tiny DiT-XL/2 of the
dit-xl2-256 lane (64 px, 4 DDIM steps, guided and not) through the CPU stand-ins (options.cuda_graphs_on_cpu: 01,
02, 03, 06, 07 are CUDA-only no-ops, 04 and 05 use their stand-ins), and the embedded digits model (DPM-Solver++,
eager). Prints per case whether latents and images are bit-identical, the latent relative L2 and the worst PSNR.

    python -m lab.probes.hoisted_adaln_cpu
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from quality_suite.metrics import fidelity_batch

ROOT = Path(__file__).resolve().parents[2]
PATCHES = sorted((ROOT / "examples" / "gpu-ladder" / "patches").glob("*.patch"))
TINY = {"root": str(ROOT), "lane": "dit-xl2-256", "preset": "dit-xl-2-256", "weights": None, "device": "cpu",
        "resolution": 64, "steps": 4, "guidance": 4.0, "batch": 2, "options": {"tiny": True, "cuda_graphs_on_cpu": True}}
EMBEDDED = {"root": str(ROOT), "lane": "embedded-cpu", "preset": "embedded-digits",
            "weights": str(ROOT / "assets" / "embedded-digits"), "device": "cpu", "resolution": 32, "steps": 4,
            "guidance": 3.0, "batch": 2, "options": {"cuda_graphs_on_cpu": True}}
REQUESTS = {"dit": ([("golden retriever", 5), ("tabby", 6)], [("goldfish", 7), ("980", 8)]),
            "embedded": ([("7", 1), ("3", 2)], [("0", 3), ("0", 4)])}


def package(work: Path, name: str, steps: list[str]):
    """model_under_test with these ladder steps applied, imported as package `name`."""
    folder = work / name / "model_under_test"
    shutil.copytree(ROOT / "model_under_test", folder, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "init", "-q"], cwd=folder.parent, check=True)
    for patch in PATCHES:
        if patch.name[:2] in steps:
            subprocess.run(["git", "apply", str(patch)], cwd=folder.parent, check=True)
    spec = importlib.util.spec_from_file_location(name, folder / "__init__.py", submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def compare(label: str, before, after, spec: dict, batches) -> None:
    old, new = before.build_pipeline(spec), after.build_pipeline(spec)
    assert new.hoisted_adaln is not None, "step 08 is not active on this path"
    for requests in batches:
        want, got = old.generate(requests), new.generate(requests)
        same = torch.equal(want.latents, got.latents) and torch.equal(want.images, got.images)
        rel = ((got.latents - want.latents).double().norm() / want.latents.double().norm()).item()
        fids = fidelity_batch(list(got.images), list(want.images), list(got.latents), list(want.latents))
        print(f"{label:<44} {[p for p, _ in requests]!s:<34} bit-identical {same!s:<5} latent rel. L2 {rel:.2e}  "
              f"worst PSNR {min(f['psnr_db'] for f in fids):.1f} dB")


def main() -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; patches {[p.name[:2] for p in PATCHES]}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for upto, path in (("07", "sampling graph (05)"), ("04", "04's denoiser graph, eager loop"),
                           ("03", "eager loop")):
            steps = [f"{i:02d}" for i in range(1, int(upto) + 1)]
            before, after = package(work, f"p{upto}", steps), package(work, f"p{upto}h", [*steps, "08"])
            for guidance in (4.0, 1.0):
                compare(f"tiny DiT, 01-{upto} vs +08, {path}, cfg {guidance}", before, after,
                        dict(TINY, guidance=guidance), REQUESTS["dit"])
        compare("embedded digits, 01-07 vs +08, eager, cfg 3.0", sys.modules["p07"], sys.modules["p07h"], EMBEDDED,
                REQUESTS["embedded"])


if __name__ == "__main__":
    main()
