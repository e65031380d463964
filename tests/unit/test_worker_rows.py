"""The worker's denoiser row count, the audit's evidence of skipped passes, is claimed only where it can see
every pass: on a multi-GPU lane another process may run half of them (CFG-parallel's second rank)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

MODEL = textwrap.dedent('''
    import torch
    from types import SimpleNamespace

    class Pipe:
        def __init__(self):
            self.components = {"transformer": torch.nn.Linear(4, 4)}

        def generate(self, requests):
            x = torch.zeros(2 * len(requests), 4)  # conditional and unconditional rows of each request
            self.components["transformer"](x)
            n = len(requests)
            return SimpleNamespace(images=torch.zeros(n, 3, 8, 8), latents=torch.zeros(n, 4, 2, 2))

    def build_pipeline(spec):
        return Pipe()
''')


@pytest.mark.parametrize("gpus,rows", [(1, 2.0), (2, None)])
def test_rows_per_image_are_claimed_only_when_every_pass_is_visible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      gpus: int, rows: float | None) -> None:
    from pytest_dit_ar.worker.server import Worker

    (tmp_path / "model_under_test").mkdir()
    (tmp_path / "model_under_test" / "__init__.py").write_text(MODEL)
    monkeypatch.delitem(sys.modules, "model_under_test", raising=False)
    worker = Worker(tmp_path, "cpu", 1, None)
    worker.build({"gpus": gpus})
    reply = worker.generate([["a digit", 1], ["a digit", 2]], str(tmp_path / "out.safetensors"))
    assert reply["denoiser_rows_per_image"] == rows
    monkeypatch.delitem(sys.modules, "model_under_test", raising=False)
