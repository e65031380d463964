"""Train the embedded-digits DiT and write it as a diffusers folder (never run at install or test time).

Command (from the repository root)::

    python -m lab.tools.train_embedded        # defaults below, seed 0 -> assets/embedded-digits/

The folder is what the `embedded-cpu` lane's `weights` names: `transformer/` (config and safetensors),
`scheduler/` (the sampler: DPM-Solver++ 2M, see SAMPLER_CONFIG), `model_index.json` and `training.json`.
It is fixed data, outside the mutable `model_under_test/`, so a candidate can change how the model runs
but never what it is.

Recorded run (the committed weights): defaults, seed 0, on this project's 2-core CPU
machine with one torch thread, no GPU: 7,000 steps in 2,900 s (48 min) while other jobs
shared the cores (load average ~5); alone it runs at ~0.25 s/step, about 30 min.
Final EMA loss 0.0505. The record is assets/embedded-digits/training.json.

What it does:
* data: scikit-learn's 1,797 handwritten 8x8 digits (``sklearn.datasets.load_digits``,
  bundled with scikit-learn, no download), scaled to [0, 1], bilinearly upsampled to
  16x16, mapped to [-1, 1]; random +-1 pixel shifts as the only augmentation;
* model: ``TRANSFORMER_CONFIG`` below (diffusers DiT, 4 blocks x 96);
* objective: epsilon prediction under a cosine (``squaredcos_cap_v2``) DDPM schedule,
  1,000 training timesteps; class labels dropped to the null class (id 10) with
  probability 0.1 so the same network also predicts the unconditional noise that
  classifier-free guidance needs;
* optimiser: AdamW (lr 6e-4, batch 64), 500 warm-up steps then cosine decay; the
  exponential moving average (0.999) of the weights is what gets saved.
Everything is seeded (torch, the data order, the noise); the result is deterministic for
a given torch build and thread count.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from diffusers import DDPMScheduler, DiTTransformer2DModel, DPMSolverMultistepScheduler

OUT = Path(__file__).resolve().parents[2] / "assets" / "embedded-digits"
NUM_CLASSES = 10
LATENT_SIZE = 16

# Architecture: 4 blocks x 96 wide (4 heads x 24), patch 2 -> 64 tokens per image.
TRANSFORMER_CONFIG = dict(num_attention_heads=4, attention_head_dim=24, in_channels=1, out_channels=1, num_layers=4,
                          sample_size=LATENT_SIZE, patch_size=2, num_embeds_ada_norm=NUM_CLASSES,
                          norm_type="ada_norm_zero")
# Noise schedule shared by training (DDPM) and sampling (DPM-Solver++ 2M).
NOISE_SCHEDULE = dict(num_train_timesteps=1000, beta_schedule="squaredcos_cap_v2", prediction_type="epsilon")
# The cosine schedule ends at alpha_bar ~ 0, where an epsilon model's implied clean image
# x0 = (x - sigma*eps)/alpha is amplified ~10^4-fold: sampling from t=999 turns rounding noise into
# visible pixel differences and, unclipped, into saturated noise. So the timesteps use "leading" spacing
# (the first of 20 steps is t=941, alpha ~ 0.09) and x0 is clipped to the data range [-1, 1]
# (Imagen-style thresholding with a fixed bound of 1.0).
SAMPLER_CONFIG = dict(NOISE_SCHEDULE, algorithm_type="dpmsolver++", solver_order=2, timestep_spacing="leading",
                      steps_offset=1, thresholding=True, sample_max_value=1.0)


def write_folder(out: Path, model: DiTTransformer2DModel, training: dict) -> None:
    """The diffusers folder the lane loads (transformer, sampler, model_index.json) plus training.json."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out / "transformer", safe_serialization=True)
    DPMSolverMultistepScheduler(**SAMPLER_CONFIG).save_pretrained(out / "scheduler")
    index = {"_class_name": "DiTPipeline", "transformer": ["diffusers", "DiTTransformer2DModel"],
             "scheduler": ["diffusers", "DPMSolverMultistepScheduler"],
             "_note": "pixel-space latents (1x16x16): no VAE; see lab/tools/train_embedded.py"}
    (out / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    (out / "training.json").write_text(json.dumps(training, indent=2) + "\n")


def digits_16x16() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1,797 digits as [N, 1, 16, 16] in [-1, 1] and their labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = F.interpolate(x, size=(16, 16), mode="bilinear", align_corners=False)
    return x * 2 - 1, torch.tensor(data.target, dtype=torch.long)


def random_shift(x: torch.Tensor, gen: torch.Generator, max_shift: int = 1) -> torch.Tensor:
    n, _, h, w = x.shape
    padded = F.pad(x, (max_shift,) * 4, value=-1.0)
    dx = torch.randint(0, 2 * max_shift + 1, (n,), generator=gen)
    dy = torch.randint(0, 2 * max_shift + 1, (n,), generator=gen)
    return torch.stack([padded[i, :, dy[i] : dy[i] + h, dx[i] : dx[i] + w] for i in range(n)])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=7000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--ema", type=float, default=0.999)
    ap.add_argument("--class-dropout", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--log-every", type=int, default=250)
    ap.add_argument("--save-every", type=int, default=1500)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    images, labels = digits_16x16()
    model = DiTTransformer2DModel(**TRANSFORMER_CONFIG)
    for module in model.modules():  # label dropout is done once per sample below, not per block
        if hasattr(module, "dropout_prob") and hasattr(module, "embedding_table"):
            module.dropout_prob = 0.0
    model.train()
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
    noise_sched = DDPMScheduler(**NOISE_SCHEDULE)
    alphas_cumprod = noise_sched.alphas_cumprod
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, betas=(0.9, 0.99))

    def lr_at(step: int) -> float:
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        frac = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * 0.5 * (1 + math.cos(math.pi * frac))

    def save(step: int, elapsed: float, loss_avg: float) -> None:
        saved = DiTTransformer2DModel(**TRANSFORMER_CONFIG)
        saved.load_state_dict({k: v.contiguous() for k, v in ema.items()})
        write_folder(args.out, saved, {
            "command": "python -m lab.tools.train_embedded",
            "args": {k: str(v) for k, v in vars(args).items()},
            "steps_done": step,
            "wall_time_s": round(elapsed, 1),
            "final_loss_ema": round(loss_avg, 5),
            "device": f"cpu ({platform.processor() or platform.machine()}), torch threads {args.threads}",
            "torch": torch.__version__,
            "data": "sklearn.datasets.load_digits (1797 images), 8x8 -> 16x16 bilinear, [-1, 1]",
        })

    n = images.shape[0]
    perm, pos = torch.randperm(n, generator=gen), 0
    start, loss_avg = time.time(), None
    for step in range(args.steps):
        if pos + args.batch > n:
            perm, pos = torch.randperm(n, generator=gen), 0
        idx = perm[pos : pos + args.batch]
        pos += args.batch
        x0 = random_shift(images[idx], gen)
        y = labels[idx].clone()
        y[torch.rand(len(y), generator=gen) < args.class_dropout] = NUM_CLASSES
        t = torch.randint(0, noise_sched.config.num_train_timesteps, (len(y),), generator=gen)
        noise = torch.randn(x0.shape, generator=gen)
        a = alphas_cumprod[t].view(-1, 1, 1, 1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        pred = model(xt, timestep=t, class_labels=y).sample
        loss = F.mse_loss(pred, noise)
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        decay = min(args.ema, (1 + step) / (10 + step))
        with torch.no_grad():
            for k, v in model.state_dict().items():
                if v.dtype.is_floating_point:
                    ema[k].mul_(decay).add_(v.detach(), alpha=1 - decay)
                else:
                    ema[k].copy_(v)
        loss_avg = loss.item() if loss_avg is None else 0.98 * loss_avg + 0.02 * loss.item()
        if (step + 1) % args.log_every == 0:
            print(f"step {step + 1}/{args.steps} loss {loss_avg:.4f} lr {lr_at(step):.2e} "
                  f"elapsed {time.time() - start:.0f}s", flush=True)
        if (step + 1) % args.save_every == 0 or step + 1 == args.steps:
            save(step + 1, time.time() - start, loss_avg)
    print(f"done: {args.steps} steps in {time.time() - start:.0f}s; weights in {args.out}", flush=True)


if __name__ == "__main__":
    main()
