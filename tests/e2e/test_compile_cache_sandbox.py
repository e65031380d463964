"""A sandboxed worker writes into its own tree's compile cache and nowhere else (docs/design/sandbox-and-security.md,
"Compile
caches"): one worker, no session (the whole-experiment attack is tests/e2e/test_attacks.py, extended tier)."""

from __future__ import annotations

import shutil
from pathlib import Path

from dit_ar_contract.device import DeviceIdentity, LaneTarget
from pytest_dit_ar.worker.client import SandboxPolicy, WorkerLauncher
from pytest_dit_ar.worker.compile_cache import CompileCaches
from tests.helpers.sandbox_required import require_sandbox

ROOT = Path(__file__).resolve().parents[2]

POISON = '''

import os as _os
import pathlib as _pathlib

for _target in TARGETS:
    try:
        _pathlib.Path(_target, "poison").write_text("slow kernels")
    except OSError:
        pass
(_pathlib.Path(_os.environ["TORCHINDUCTOR_CACHE_DIR"]).parent / "mine").write_text("my own cache")
'''


def test_a_sandboxed_worker_writes_only_into_its_own_trees_cache(tmp_path: Path) -> None:
    require_sandbox()
    state = tmp_path / "project" / ".autoresearch"
    caches = CompileCaches(state / "compile-cache")
    best, _ = caches.open("b" * 32)  # the best's cache folder, filled by its workers earlier
    (best / "inductor").mkdir()
    tree = tmp_path / "project" / "candidate"
    shutil.copytree(ROOT / "model_under_test", tree / "model_under_test", ignore=shutil.ignore_patterns("__pycache__"))
    init = tree / "model_under_test" / "__init__.py"
    init.write_text(init.read_text() + f"\nTARGETS = {[str(best), str(caches.root), str(best / 'inductor')]!r}\n"
                    + POISON)
    target = LaneTarget("embedded-cpu", "embedded-cpu", "cpu", DeviceIdentity("cpu"), on_target=True)
    policy = SandboxPolicy(hide=(state,), expose=(tmp_path / "project",))
    launcher = WorkerLauncher(target, 1, 300.0, policy, caches)
    worker = launcher.worker("candidate", tree, tmp_path / "project" / "logs" / "worker.log")
    spec = {"root": str(launcher.model_root(tree)), "lane": "embedded-cpu", "preset": "embedded-digits",
            "weights": str(ROOT / "assets" / "embedded-digits"), "device": "cpu", "resolution": 32, "steps": 2,
            "guidance": 3.0, "batch": 1, "options": {}}
    try:
        worker.start()
        worker.request("build", spec=spec)
    finally:
        worker.close()
    assert worker.cache_digest is not None and worker.cache_digest != "b" * 32 and not worker.cache_warm
    assert (caches.folder(worker.cache_digest) / "mine").read_text() == "my own cache"
    assert not list(caches.root.rglob("poison"))  # not the best's folder, its inductor cache nor the root
