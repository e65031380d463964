"""Generate the GPU ladder's patches: one idea each, every patch on top of the ones before it.

Usage: python examples/gpu-ladder/make_patches.py [OUT_DIR]   (default: examples/gpu-ladder/patches)

The steps are applied in order to a scratch repository holding the committed model_under_test/ (git archive
HEAD), committed one by one, and each patch is the diff of its step (one line of context). Every GPU idea
is guarded by the pipeline's device (`cuda`), so the embedded CPU lane runs the code it ran before.
Step 04 is the hand-made CUDA graphs candidate of examples/cuda-graphs/ (its edits and module, reused);
step 05 adds examples/gpu-ladder/sampling_graph.py as model_under_test/sampling_graph.py, step 08
examples/gpu-ladder/hoisted_adaln.py as model_under_test/hoisted_adaln.py.
"""
from __future__ import annotations

import importlib.util
import io
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from typing import Callable

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def load(name: str, path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HAND = load("cuda_graphs_make_patch", ROOT / "examples" / "cuda-graphs" / "make_patch.py")


def edit(path: pathlib.Path, old: str, new: str) -> None:
    """Replace the one occurrence of old by new (fails loudly when the baseline moved)."""
    text = path.read_text()
    if text.count(old) != 1:
        sys.exit(f"{path} does not contain exactly one copy of:\n{old}")
    path.write_text(text.replace(old, new))


def after(path: pathlib.Path, anchor: str, block: str) -> None:
    """Insert block after the (unique) text anchor, which ends with a newline."""
    edit(path, anchor, anchor + block)


def steps(tree: pathlib.Path) -> list[tuple[str, str, Callable[[], None]]]:
    P, S = tree / "model_under_test/pipeline.py", tree / "model_under_test/presets.py"

    def batch_cfg() -> None:
        edit(P, "                if self.guidance > 1.0:\n"
                "                    # classifier-free guidance: a conditional and an unconditional pass\n",
             "                if self.guidance > 1.0 and self.device.type == \"cuda\":  # both passes as one forward\n"
             "                    both = self.predict_noise(torch.cat([model_input, model_input]), t, "
             "torch.cat([labels, null]))\n"
             "                    eps_cond, eps_uncond = both.chunk(2)\n"
             "                    eps = eps_uncond + self.guidance * (eps_cond - eps_uncond)\n"
             "                elif self.guidance > 1.0:\n"
             "                    # classifier-free guidance: a conditional and an unconditional pass\n")

    def regional_compile() -> None:
        edit(P, "        self.scheduler = scheduler\n        self.vae = vae\n",
             "        self.scheduler = scheduler\n"
             "        if self.device.type == \"cuda\":  # one compiled graph shared by the 28 identical blocks\n"
             "            for block in transformer.transformer_blocks:\n"
             "                block.compile()\n"
             "        self.vae = vae\n")

    def bf16_transformer() -> None:
        after(S, "        transformer, vae = _finish(transformer, device, dtype), _finish(vae, device, dtype)\n",
              "        if torch.device(device).type == \"cuda\":  # bf16 arithmetic on the same fp32-initialised weights\n"
              "            transformer = transformer.to(torch.bfloat16)\n")

    def hand_graphs() -> None:
        P.write_text(HAND.edit(P.read_text()))
        shutil.copy(ROOT / "examples" / "cuda-graphs" / "cuda_graphs.py", tree / "model_under_test" / "cuda_graphs.py")

    def compiled_bf16_decode() -> None:
        after(S, "        scheduler = DDIMScheduler(**DIT_SCHEDULER)\n",
              "        if torch.device(device).type == \"cuda\":  # the decode in bf16, its norms and pointwise ops fused\n"
              "            vae = vae.to(torch.bfloat16)\n"
              "            vae.decoder.compile()\n")

    def sampling_graph() -> None:
        shutil.copy(HERE / "sampling_graph.py", tree / "model_under_test" / "sampling_graph.py")
        after(P, "        self.latent_channels = int(cfg.in_channels)\n",
              "        # the whole sampling loop and the decode replayed as CUDA graphs (sampling_graph.py)\n"
              "        from .sampling_graph import SamplingGraph\n"
              "\n"
              "        self.sampling_graph = SamplingGraph.for_pipeline(self)\n")
        after(P, "        return images\n\n    @torch.inference_mode()\n"
                 "    def generate(self, requests: Sequence[Request]) -> GenerationResult:\n",
              "        if self.sampling_graph is not None:  # a batch size's generates replay the same captured kernels\n"
              "            return self.sampling_graph.generate(requests)\n")

    def fused_qkv() -> None:
        after(P, "        self.null_class = int(cfg.num_embeds_ada_norm)\n",
              "        if self.device.type == \"cuda\":  # one [3*1152, 1152] GEMM per self-attention instead of three\n"
              "            from diffusers.models.attention_processor import FusedAttnProcessor2_0\n"
              "\n"
              "            for block in transformer.transformer_blocks:\n"
              "                block.attn1.fuse_projections()\n"
              "                block.attn1.set_processor(FusedAttnProcessor2_0())\n")

    def hoisted_adaln() -> None:
        shutil.copy(HERE / "hoisted_adaln.py", tree / "model_under_test" / "hoisted_adaln.py")
        after(P, "        self.label_fn = label_fn\n",
              "        # every block's adaLN modulation for all the loop's timesteps, once a generate (hoisted_adaln.py)\n"
              "        self.hoisted_adaln = None\n"
              "        if self.device.type == \"cuda\" or (self.spec.get(\"options\") or {}).get(\"cuda_graphs_on_cpu\"):\n"
              "            from .hoisted_adaln import HoistedAdaLN\n"
              "\n"
              "            self.hoisted_adaln = HoistedAdaLN.for_pipeline(transformer, scheduler, self.steps,\n"
              "                                                           int(self.spec.get(\"batch\") or 1))\n")
        after(P, "        ids = [self.null_class if i is None else int(i) for i in ids]\n",
              "        if self.hoisted_adaln is not None:  # this batch's classes and the null class, at every step\n"
              "            self.hoisted_adaln.prepare(ids + [self.null_class])\n")

    return [
        ("01-exact-batch-cfg", "run the two classifier-free guidance passes as one batched forward", batch_cfg),
        ("02-exact-regional-compile",
         "regional torch.compile: the repeated transformer block compiled once, reused by all 28", regional_compile),
        ("03-numerical-bf16-transformer",
         "cast the DiT-XL/2 transformer to bfloat16 at run time (same fp32-initialised weights)", bf16_transformer),
        ("04-exact-cuda-graphs-denoiser", HAND.SUBJECT, hand_graphs),
        ("05-exact-sampling-graph", "one CUDA graph for the whole sampling loop (denoiser passes, guidance combine, "
                                    "scheduler step) and one for the decode", sampling_graph),
        ("06-numerical-compiled-bf16-decode",
         "the VAE decoder in bfloat16 and compiled: its GroupNorms as split reductions fused with the SiLUs and adds",
         compiled_bf16_decode),
        ("07-exact-fused-qkv", "fuse the q, k and v projections of every self-attention into one GEMM", fused_qkv),
        ("08-numerical-hoisted-adaln", "every DiT block's adaLN modulation for all the sampling loop's timesteps, one "
                                   "batched GEMM a generate, each pass reading its rows", hoisted_adaln),
    ]


def main(out: pathlib.Path) -> list[pathlib.Path]:
    with tempfile.TemporaryDirectory() as tmp:
        tree = pathlib.Path(tmp)

        def git(*args: str) -> str:
            return subprocess.run(["git", *args], cwd=tree, check=True, capture_output=True, text=True).stdout

        archive = subprocess.run(["git", "archive", "HEAD", "model_under_test"], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        tarfile.open(fileobj=io.BytesIO(archive)).extractall(tree, filter="data")
        git("init", "-q")
        git("add", "-A")
        git("-c", "user.name=ladder", "-c", "user.email=ladder@dit-ar.invalid", "commit", "-qm", "baseline")
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*.patch"):
            old.unlink()
        written = []
        for name, subject, change in steps(tree):
            change()
            git("add", "-A")
            diff = git("diff", "--cached", "-U1")
            if not diff:
                sys.exit(f"{name} changed nothing")
            git("-c", "user.name=ladder", "-c", "user.email=ladder@dit-ar.invalid", "commit", "-qm", name)
            path = out / f"{name}.patch"
            path.write_text(f"Subject: {subject}\n\n{diff}")
            written.append(path)
        return written


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit(__doc__)
    for written in main(pathlib.Path(sys.argv[1]) if len(sys.argv) == 2 else HERE / "patches"):
        print(written)
