"""Generate the hand-made CUDA-graphs candidate patch against the unmodified model_under_test/ of a clean checkout.

Usage: python make_patch.py CLEAN_CHECKOUT OUT_DIR   (the checkout's model_under_test/ is reset afterwards)

The patch adds model_under_test/cuda_graphs.py (a copy of this folder's cuda_graphs.py) and two edits to
model_under_test/pipeline.py: the end of ClassConditionalPipeline.__init__ wraps the transformer's forward in a
StaticGraph on CUDA (or with the CPU stand-in when options.cuda_graphs_on_cpu is set), and predict_noise
calls it. Nothing is compiled.
"""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

NAME = "cuda-graphs.patch"
SUBJECT = "CUDA graphs by hand: the DiT forward captured once over the lane's fixed shapes and replayed"

INIT_END = '''\
                    f"but the transformer was built for {cfg.sample_size}x{cfg.sample_size}"
                )
'''
INIT_NEW = INIT_END + '''\
        # CUDA graphs by hand (examples/cuda-graphs): one graph per input signature over static buffers
        self.graphed = None
        on_cpu = bool((self.spec.get("options") or {}).get("cuda_graphs_on_cpu"))
        if self.device.type == "cuda" or on_cpu:
            from .cuda_graphs import CudaBackend, EagerBackend, StaticGraph

            def forward(x, t, labels):
                return self.transformer(x, timestep=t, class_labels=labels).sample

            self.graphed = StaticGraph(forward, EagerBackend() if self.device.type != "cuda" else CudaBackend())
'''
PREDICT_OLD = '''\
        dtype = self.transformer.dtype
        out = self.transformer(
            latents.to(dtype), timestep=self._timestep_batch(t, latents.shape[0]), class_labels=labels
        ).sample
'''
PREDICT_NEW = '''\
        dtype = self.transformer.dtype
        if self.graphed is not None:  # static buffers: the timestep batch is materialised, not an expanded view
            out = self.graphed(latents.to(dtype), self._timestep_batch(t, latents.shape[0]).contiguous(), labels)
            return out[:, : self.latent_channels].float()
        out = self.transformer(
            latents.to(dtype), timestep=self._timestep_batch(t, latents.shape[0]), class_labels=labels
        ).sample
'''


def edit(text: str) -> str:
    for old, new in ((INIT_END, INIT_NEW), (PREDICT_OLD, PREDICT_NEW)):
        if text.count(old) != 1:
            sys.exit(f"model_under_test/pipeline.py does not contain exactly one copy of:\n{old}")
        text = text.replace(old, new)
    return text


def main(root: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout

    if git("status", "--porcelain", "--", "model_under_test"):
        sys.exit(f"{root}/model_under_test has uncommitted changes; use a clean checkout (this script resets it)")
    pipeline = root / "model_under_test" / "pipeline.py"
    pipeline.write_text(edit(pipeline.read_text()))
    shutil.copy(pathlib.Path(__file__).with_name("cuda_graphs.py"), root / "model_under_test" / "cuda_graphs.py")
    try:
        git("add", "-N", "model_under_test/cuda_graphs.py")
        diff = git("diff", "--", "model_under_test")
    finally:
        git("reset", "-q", "--", "model_under_test")
        git("checkout", "--", "model_under_test")
        (root / "model_under_test" / "cuda_graphs.py").unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    path = out / NAME
    path.write_text(f"Subject: {SUBJECT}\n\n{diff}")
    return path


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(main(pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2]).resolve()))
