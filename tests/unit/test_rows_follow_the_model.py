"""The audit's row count follows the model, not one call path (worker/rows.py): a legitimate lean forward (the
denoiser's `forward` called directly, or its blocks run in a loop of the pipeline's own) counts the same rows as
the shipped call, and a forward that calls none of the denoiser's modules is reported as unseen, never as a
cut. On the embedded lane's real DiT (diffusers) the direct `forward` is counted as the shipped call is."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch

from pytest_dit_ar.worker.rows import DenoiserRows, entry_modules

ROOT = Path(__file__).resolve().parents[2]


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mix = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mix(x).tanh()


class Denoiser(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(4, 4)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.out = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h)


def shipped(d: Denoiser, x: torch.Tensor) -> torch.Tensor:
    return d(x)


def direct_forward(d: Denoiser, x: torch.Tensor) -> torch.Tensor:
    return d.forward(x)


def lean_loop(d: Denoiser, x: torch.Tensor) -> torch.Tensor:
    """A rewrite that inlines the embedding and runs the blocks itself."""
    h = torch.nn.functional.linear(x, d.embed.weight, d.embed.bias)
    for block in d.blocks:
        h = block(h)
    return d.out(h)


def functional(d: Denoiser, x: torch.Tensor) -> torch.Tensor:
    """Every module inlined: nothing the hooks can see."""
    h = torch.nn.functional.linear(x, d.embed.weight, d.embed.bias)
    for block in d.blocks:
        h = h + torch.nn.functional.linear(h, block.mix.weight, block.mix.bias).tanh()
    return torch.nn.functional.linear(h, d.out.weight, d.out.bias)


def sample(call, steps: int = 5, batch: int = 3) -> tuple[int, str | None]:
    d = Denoiser()
    rows = DenoiserRows(d)
    rows.reset()
    x = torch.randn(batch, 4)
    with torch.inference_mode():
        for _ in range(steps):
            x = call(d, x)
            call(d, x)  # a second (unconditional) pass a step
    return rows.rows, rows.seen_at


def test_entry_modules_are_the_children_and_the_first_of_each_container() -> None:
    assert [name for name, _ in entry_modules(Denoiser())] == ["embed", "blocks.0", "out"]


@pytest.mark.parametrize("call", [shipped, direct_forward, lean_loop])
def test_a_lean_forward_counts_the_rows_the_shipped_call_counts(call) -> None:
    rows, seen_at = sample(call)
    assert rows == 5 * 2 * 3
    assert (seen_at == "denoiser") is (call is shipped)


def test_a_forward_that_calls_no_module_of_the_denoiser_counts_nothing() -> None:
    assert sample(functional) == (0, None)


MODEL = textwrap.dedent('''
    from .pipeline import ClassConditionalPipeline

    def _lean(self, latents, t, labels):
        dtype = self.transformer.dtype
        out = self.transformer.forward(latents.to(dtype), timestep=self._timestep_batch(t, latents.shape[0]),
                                       class_labels=labels).sample
        return out[:, : self.latent_channels].float()

    ClassConditionalPipeline.predict_noise = _lean
''')


@pytest.mark.parametrize("lean", [False, True])
def test_the_embedded_dit_counts_a_direct_forward_as_the_shipped_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     lean: bool) -> None:
    import shutil

    from pytest_dit_ar.worker.server import Worker

    shutil.copytree(ROOT / "model_under_test", tmp_path / "model_under_test",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if lean:
        init = tmp_path / "model_under_test" / "__init__.py"
        init.write_text(init.read_text() + "\nfrom . import lean  # noqa: E402,F401\n")
        (tmp_path / "model_under_test" / "lean.py").write_text(MODEL)
    monkeypatch.delitem(sys.modules, "model_under_test", raising=False)
    try:
        worker = Worker(tmp_path, "cpu", 1, None)
        worker.build({"root": str(ROOT), "lane": "embedded-cpu", "preset": "embedded-digits",
                      "weights": str(ROOT / "assets" / "embedded-digits"), "device": "cpu", "resolution": 32,
                      "steps": 3, "guidance": 3.0, "batch": 2, "options": {}})
        reply = worker.generate([["7", 1], ["3", 2]], str(tmp_path / "out.safetensors"))
    finally:
        for key in [k for k in sys.modules if k.split(".")[0] == "model_under_test"]:
            monkeypatch.delitem(sys.modules, key, raising=False)
    assert reply["denoiser_rows_per_image"] == 3 * 2  # three steps, a conditional and an unconditional pass
    assert worker.counter.seen_at == ("pos_embed" if lean else "denoiser")
