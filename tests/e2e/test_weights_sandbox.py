"""What `sandbox.unreadable_refusal` predicts against what a real sandboxed worker can read: the worker's own
bubblewrap command (as nobody where dit-ar runs as root) opens every file of a weights folder, and the files it
cannot open are exactly those the prediction names (modes, a closed folder above the weights, links out)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pytest_dit_ar.worker import sandbox
from tests.helpers.sandbox_required import require_sandbox

READER = """
import json, pathlib, sys
failed = []
for name in sys.argv[2:]:
    try:
        pathlib.Path(sys.argv[1], name).read_bytes()
    except OSError as exc:
        failed.append(name)
print(json.dumps(failed))
"""


def worker_cannot_read(tmp_path: Path, folder: Path, names: list[str], expose: tuple[Path, ...]) -> list[str]:
    """The names under `folder` a sandboxed process cannot read (the launcher's command, with `expose` shown)."""
    side, scratch = tmp_path / "side", tmp_path / "scratch"
    side.mkdir(exist_ok=True)
    scratch.mkdir(exist_ok=True)
    scratch.chmod(0o777)
    spec = sandbox.SandboxSpec(side_root=side, scratch=scratch, expose=expose)
    read_end, write_end = os.pipe()
    try:
        cmd = sandbox.command(spec, [sys.executable, "-c", READER, str(folder), *names], write_end)
        proc = subprocess.run(cmd, pass_fds=(write_end,), capture_output=True, text=True, timeout=120)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_prediction_matches_a_real_sandbox(tmp_path: Path) -> None:
    require_sandbox()
    root = tmp_path / "project"
    folder = root / "weights" / "pipe"
    (folder / "vae").mkdir(parents=True)
    for name, mode in (("model_index.json", 0o644), ("vae/open.safetensors", 0o644),
                       ("vae/closed.safetensors", 0o600)):
        (folder / name).write_bytes(b"\0" * 8)
        (folder / name).chmod(mode)
    names = ["model_index.json", "vae/open.safetensors", "vae/closed.safetensors"]
    predicted = {n for n in names if any(p.startswith(n) for p in sandbox.unreadable(folder, 10, (root,)))}
    assert worker_cannot_read(tmp_path, folder, names, (root,)) == sorted(predicted, key=names.index)
    assert predicted == ({"vae/closed.safetensors"} if sandbox.privileged() else set())

    (folder / "vae" / "closed.safetensors").chmod(0o644)
    (root / "weights").chmod(0o700)  # a folder above the weights that only its owner may enter
    try:
        closed = sandbox.privileged()
        assert bool(sandbox.unreadable_refusal(folder, (root,))) is closed
        assert worker_cannot_read(tmp_path, folder, names, (root,)) == (names if closed else [])
    finally:
        (root / "weights").chmod(0o755)

    outside = tmp_path / "blobs" / "blob"
    outside.parent.mkdir()
    outside.write_text("{}")
    (folder / "linked.json").symlink_to(outside)
    assert sandbox.unreadable_refusal(folder, (root,)) is not None
    assert worker_cannot_read(tmp_path, folder, ["model_index.json", "linked.json"], (root,)) == ["linked.json"]
