"""Train the digit judge (never run at test time).

Command (from the repository root)::

    python -m quality_suite.judge.train

Writes quality_suite/judge/judge.safetensors (weights; metadata records the held-out
accuracy, epochs, seed and wall time) and quality_suite/judge/real_stats.safetensors
(mean and covariance of the 64-d penultimate features of all 1,797 real digits).

Data: scikit-learn's handwritten digits, split 75/25 stratified with seed 0
(``quality_suite.judge.heldout_split``); the 25 % held-out part is never trained on.
Digits are rendered as the embedded model decodes them (8x8 -> 16x16 -> 32x32
bilinear). Augmentation makes the judge robust to generated images: random affine
(rotation, scale, shift, shear), blur or unsharp-mask sharpening, gamma/contrast and
saturation changes, a 32 -> 16 -> 32 round trip, and pixel noise. Seeded; CPU only.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from quality_suite import judge as J


def gaussian_blur(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Per-sample Gaussian blur (5x5) of [N, 1, H, W]."""
    r = torch.arange(-2, 3, dtype=torch.float32)
    k1 = torch.exp(-(r.view(1, -1) ** 2) / (2 * sigma.view(-1, 1) ** 2))
    k1 = k1 / k1.sum(1, keepdim=True)
    k2 = k1.unsqueeze(2) * k1.unsqueeze(1)  # [N, 5, 5]
    padded = F.pad(x, (2, 2, 2, 2), mode="replicate").transpose(0, 1)  # [1, N, H+4, W+4]
    return F.conv2d(padded, k2.unsqueeze(1), groups=x.shape[0]).transpose(0, 1)


def augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    n = x.shape[0]

    def u(lo, hi):
        return lo + (hi - lo) * torch.rand(n, generator=gen)

    def coin(p):
        return (torch.rand(n, generator=gen) < p).view(-1, 1, 1, 1).float()

    angle = u(-12, 12) * math.pi / 180
    scale = u(0.85, 1.15)
    shear = u(-0.12, 0.12)
    tx, ty = u(-0.16, 0.16), u(-0.16, 0.16)
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    theta = torch.stack([torch.stack([cos, -sin + shear, tx], 1), torch.stack([sin, cos, ty], 1)], 1)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    x = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)

    blurred = gaussian_blur(x, u(0.4, 1.2))
    amount = u(0.5, 2.0).view(-1, 1, 1, 1)
    sharpened = (x + amount * (x - blurred)).clamp(0, 1)
    pick = torch.rand(n, generator=gen).view(-1, 1, 1, 1)
    x = torch.where(pick < 0.25, blurred, torch.where(pick < 0.5, sharpened, x))

    small = F.interpolate(x, size=(16, 16), mode="bilinear", align_corners=False, antialias=True)
    round_trip = F.interpolate(small, size=x.shape[-2:], mode="bilinear", align_corners=False)
    x = torch.where(coin(0.3).bool(), round_trip, x)

    gamma = u(0.6, 1.6).view(-1, 1, 1, 1)
    x = x.clamp(0, 1) ** gamma
    peak = u(0.7, 1.0).view(-1, 1, 1, 1)
    x = x * peak
    sat = torch.where(coin(0.25).bool(), ((x - 0.15) * 1.6).clamp(0, 1), x)
    x = sat + u(0.0, 0.05).view(-1, 1, 1, 1) * torch.randn(x.shape, generator=gen)
    return x.clamp(0, 1)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=J.JUDGE_DIR)
    args = ap.parse_args(argv)

    from safetensors.torch import save_file
    from sklearn.datasets import load_digits

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    data = load_digits()
    train_idx, test_idx = J.heldout_split()
    x_all = J.render_digits(data.images)
    y_all = torch.tensor(data.target, dtype=torch.long)
    x_tr, y_tr = x_all[train_idx], y_all[train_idx]

    net = J.DigitCNN()
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=1e-4)
    steps_per_epoch = math.ceil(len(x_tr) / args.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.epochs * steps_per_epoch)
    start = time.time()
    for epoch in range(args.epochs):
        net.train()
        perm = torch.randperm(len(x_tr), generator=gen)
        total = 0.0
        for i in range(0, len(x_tr), args.batch):
            idx = perm[i : i + args.batch]
            xb = J.normalize(augment(x_tr[idx], gen))
            loss = F.cross_entropy(net(xb), y_tr[idx], label_smoothing=0.05)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
        judge = J.Judge(net)
        acc = J.heldout_accuracy(judge)
        net.train()
        print(f"epoch {epoch + 1}/{args.epochs} loss {total / len(x_tr):.4f} held-out acc {acc:.4f} "
              f"({time.time() - start:.0f}s)", flush=True)

    net.eval()
    judge = J.Judge(net)
    acc = J.heldout_accuracy(judge)
    elapsed = time.time() - start
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "heldout_accuracy": f"{acc:.4f}",
        "heldout_size": str(len(test_idx)),
        "train_size": str(len(train_idx)),
        "epochs": str(args.epochs),
        "seed": str(args.seed),
        "wall_time_s": f"{elapsed:.1f}",
        "torch": torch.__version__,
        "command": " ".join(["python -m quality_suite.judge.train", *(argv if argv is not None else sys.argv[1:])]),
        "threads": str(args.threads),
    }
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(args.out / J.WEIGHTS_NAME), metadata=meta)
    mean, cov = J.feature_stats(judge.features(x_all))
    save_file({"mean": mean, "cov": cov, "count": torch.tensor([len(x_all)])}, str(args.out / J.STATS_NAME),
              metadata={"source": "judge features of all 1797 sklearn digits rendered 8->16->32 bilinear"})
    print(f"held-out accuracy {acc:.4f} on {len(test_idx)} digits; {elapsed:.0f}s; wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
