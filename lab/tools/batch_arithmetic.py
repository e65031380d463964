"""How far the batch arithmetic moves the embedded model's latents, on this machine's CPU: the default run (the
lane's batch), every case alone (`split-batch`), two batches as one (`merged-batches`) and batched classifier-free
guidance (the demo's first candidate, the two guidance halves in one forward), for N sessions of 40 keyed cases.

    python -m lab.tools.batch_arithmetic --sessions 4

Prints, per session, each rerun's worst latent_rel_l2 against the default run, batched guidance's worst over the
worst of the reruns, and the largest difference between batched guidance and the merged rerun (0 where they are
the same bits). The envelope's rule (docs/design/quality.md) is the worst over the reruns times the lane's
`exact.envelope_multiple`.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch

import model_under_test
from model_under_test import pipeline as P

ROOT = Path(__file__).resolve().parents[2]


def _lane() -> dict:
    lane = json.loads((ROOT / "config" / "autoresearch.json").read_text())["lanes"]["embedded-cpu"]
    return dict(lane, root=str(ROOT), lane="embedded-cpu", options={}, gpus=1)


@torch.inference_mode()
def _batched_guidance(pipe, requests) -> torch.Tensor:
    """The demo's 01-exact-batch-cfg sampling loop: one forward for both guidance halves."""
    prompts, seeds = [p for p, _ in requests], [s for _, s in requests]
    labels = pipe.encode_labels(prompts)
    null = torch.full_like(labels, pipe.null_class)
    shape = (pipe.latent_channels, pipe.latent_size, pipe.latent_size)
    latents = P.initial_noise(seeds, shape, pipe.device) * pipe.scheduler.init_noise_sigma
    pipe.scheduler.set_timesteps(pipe.steps, device=pipe.device)
    for t in pipe.scheduler.timesteps:
        x = pipe.scheduler.scale_model_input(latents, t)
        cond, uncond = pipe.predict_noise(torch.cat([x, x]), t, torch.cat([labels, null])).chunk(2)
        latents = pipe.scheduler.step(uncond + pipe.guidance * (cond - uncond), t, latents).prev_sample
    return latents


def _latents(cases: list[tuple[str, int]], batch: int, batched_guidance: bool = False) -> torch.Tensor:
    pipe = model_under_test.build_pipeline(dict(_lane(), batch=batch))
    run = (lambda group: _batched_guidance(pipe, group)) if batched_guidance else \
        (lambda group: pipe.generate(group).latents)
    return torch.cat([run(cases[i:i + batch]) for i in range(0, len(cases), batch)])


def _worst_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).flatten(1).norm(dim=1) / b.flatten(1).norm(dim=1)).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    batch = int(_lane()["batch"])
    for session in range(args.sessions):
        rng = random.Random(session)
        cases = [(f"a handwritten digit {rng.randrange(10)}", rng.randrange(2**31)) for _ in range(40)]
        default = _latents(cases, batch)
        split, merged = _latents(cases, 1), _latents(cases, 2 * batch)
        guided = _latents(cases, batch, batched_guidance=True)
        rs, rm, rg = _worst_rel(split, default), _worst_rel(merged, default), _worst_rel(guided, default)
        print(f"session {session}: split-batch {rs:.3e}, merged-batches {rm:.3e}, batched guidance {rg:.3e}; "
              f"guidance / split {rg / max(rs, 1e-30):.2f}, guidance / worst rerun {rg / max(rs, rm, 1e-30):.2f}; "
              f"guidance - merged, largest {float((guided - merged).abs().max()):.2e}", flush=True)


if __name__ == "__main__":
    main()
