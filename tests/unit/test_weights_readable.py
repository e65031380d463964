"""A weights folder the sandboxed worker cannot read is refused up front with the fix (the worker runs as nobody
when dit-ar runs as root, and `save_pretrained` writes its safetensors files 0600)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_dit_ar.worker import sandbox


@pytest.fixture
def as_root(monkeypatch):
    monkeypatch.setattr(sandbox, "privileged", lambda: True)


def _folder(tmp_path: Path, weights_mode: int, dir_mode: int = 0o755) -> Path:
    folder = tmp_path / "pipe"
    (folder / "vae").mkdir(parents=True)
    (folder / "model_index.json").write_text("{}")
    weights = folder / "vae" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(b"\0" * 8)
    weights.chmod(weights_mode)
    (folder / "vae").chmod(dir_mode)
    return folder


def test_a_0600_weights_file_is_named_with_its_mode_and_the_fix(tmp_path, as_root):
    folder = _folder(tmp_path, 0o600)
    assert sandbox.unreadable(folder) == ["vae/diffusion_pytorch_model.safetensors (mode 0600)"]
    refusal = sandbox.unreadable_refusal(folder)
    assert refusal is not None and f"chmod -R a+rX {folder}" in refusal and "nobody" in refusal


def test_a_folder_nobody_cannot_enter_is_named(tmp_path, as_root):
    folder = _folder(tmp_path, 0o644, dir_mode=0o750)
    assert sandbox.unreadable(folder)[0] == "vae (mode 0750)"


def test_world_readable_weights_pass(tmp_path, as_root):
    assert sandbox.unreadable(_folder(tmp_path, 0o644)) == []
    assert sandbox.unreadable_refusal(_folder(tmp_path / "b", 0o444)) is None


def test_as_an_ordinary_user_the_worker_reads_what_the_user_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "privileged", lambda: False)
    assert sandbox.unreadable(_folder(tmp_path, 0o600)) == []

