"""A weights folder the sandboxed worker cannot read is refused up front with the fix (the worker runs as nobody
when dit-ar runs as root, and `save_pretrained` writes its safetensors files 0600), and so is one whose files link
out of it (the sandbox shows the folder alone). tests/e2e/test_weights_sandbox.py checks these predictions against
a real sandbox."""

from __future__ import annotations

import os
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



def _stat(mode: int, uid: int = 0, gid: int = 0) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, gid, 0, 0, 0, 0))


@pytest.mark.parametrize("mode,uid,gid,readable", [
    (0o100600, 0, 0, False),  # root's 0600: nobody is neither owner nor group
    (0o100600, sandbox.UNPRIVILEGED, 0, True),  # nobody's own file: the owner's bits
    (0o100640, 0, sandbox.UNPRIVILEGED, True),  # nogroup's file: the group's bits
    (0o100604, 0, sandbox.UNPRIVILEGED, False),  # nogroup's file without group read: the others' bit is not asked
    (0o100644, 0, 0, True),
])
def test_the_kernel_picks_owner_group_or_other_bits_for_nobody(mode, uid, gid, readable):
    assert sandbox._nobody_may(_stat(mode, uid, gid), 0o4) is readable


def test_a_project_folder_nobody_cannot_enter_above_the_weights_is_named_with_its_own_fix(tmp_path, as_root):
    """Weights inside the project: the sandbox shows the project root as it is, so the folders between it and the
    weights must let nobody in too (other parents the sandbox makes 0755 itself)."""
    root = tmp_path / "project"
    folder = _folder(root / "private", 0o644)
    (root / "private").chmod(0o700)
    try:
        assert sandbox.unreadable(folder) == []  # alone, the folder is fine: its parents are the sandbox's own
        assert sandbox.unreadable(folder, visible=(root,)) == [f"{root / 'private'} (mode 0700)"]
        refusal = sandbox.unreadable_refusal(folder, (root,))
        assert refusal is not None and f"`chmod a+rx {root / 'private'}`" in refusal
        assert "chmod -R" not in refusal  # what is inside is readable: only the parent needs the fix
    finally:
        (root / "private").chmod(0o755)


def test_both_fixes_when_the_parent_and_the_files_are_closed(tmp_path, as_root):
    root = tmp_path / "project"
    folder = _folder(root / "private", 0o600)
    (root / "private").chmod(0o700)
    try:
        refusal = sandbox.unreadable_refusal(folder, (root,))
        assert refusal is not None
        assert f"`chmod a+rx {root / 'private'}` and `chmod -R a+rX {folder}`" in refusal
    finally:
        (root / "private").chmod(0o755)


def _hub_snapshot(tmp_path: Path) -> Path:
    """A pipeline as the Hugging Face hub cache keeps it: every file of a snapshot links to a blob outside it."""
    repo = tmp_path / "hub" / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc").write_text("{}")
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "model_index.json").symlink_to("../../blobs/abc")
    return snapshot


@pytest.mark.parametrize("privileged", [True, False])
def test_links_out_of_the_folder_are_refused_for_every_user(tmp_path, monkeypatch, privileged):
    """The sandbox binds the weights folder alone: a link to a blob outside it is a missing file for the worker,
    whoever runs dit-ar."""
    monkeypatch.setattr(sandbox, "privileged", lambda: privileged)
    snapshot = _hub_snapshot(tmp_path)
    blob = (snapshot / "model_index.json").resolve()
    assert sandbox.outside_links(snapshot) == [f"model_index.json -> {blob}"]
    refusal = sandbox.unreadable_refusal(snapshot)
    assert refusal is not None and f"`cp -rL {snapshot} {snapshot}-files`" in refusal and "cannot see" in refusal
    assert sandbox.outside_links(snapshot, visible=(tmp_path / "hub",)) == []  # the blob lies in a shown folder


def test_links_inside_the_folder_and_dangling_links(tmp_path, as_root):
    folder = _folder(tmp_path, 0o644)
    (folder / "again.json").symlink_to("model_index.json")
    assert sandbox.outside_links(folder) == [] and sandbox.unreadable_refusal(folder) is None
    (folder / "gone.json").symlink_to(tmp_path / "nowhere.json")
    assert sandbox.outside_links(folder) == [f"gone.json -> {tmp_path / 'nowhere.json'}"]
