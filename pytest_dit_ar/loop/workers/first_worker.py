"""A new tree's first worker: it fills the tree's compile cache and is neither judged nor timed.

Every later worker of a tree starts from a copy of the tree's cache folder, and only the tree's first worker's copy
is written back into it (worker/spawn.py `open_cache`). If that first worker were the candidate's quality worker,
what it left in its cache (its compiled kernels, or a file of its own) would reach every later worker of the
experiment, its timed ones, and nothing else: a timed worker could tell it is not the judged one by looking (and a
compiled tree's quality worker could tell it is the judged one by its cold cache). So before the quality run, a
tree whose folder no worker has filled yet gets a worker of its own that builds the pipeline and generates one batch
of fresh requests, and whose cache becomes the tree's folder; the quality worker and the timed ones then all start
from the same copy, and nothing a judged or timed worker writes reaches another (docs/design/sandbox-and-security.md,
"Compile caches"). Its build and first generate are the tree's cold start (the tree's record).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...worker.client import WorkerLauncher, WorkerProcess


def cache_is_cold(launcher: WorkerLauncher, root: Path) -> bool:
    """Whether no worker of the tree at `root` has filled its cache folder yet (False without caches)."""
    caches = launcher.caches
    if caches is None:
        return False
    digest = launcher.tree_digest(root)
    return caches.record(digest).workers == 0 or not caches.folder(digest).is_dir()


def fill_cache(launcher: WorkerLauncher, side: str, root: Path, spec: dict[str, Any], prompts: tuple[str, ...],
               batch: int, resolution: int | None, log: Path,
               forked: Callable[[], WorkerProcess | None] | None = None, cold: bool | None = None) -> float | None:
    """Run the tree's first worker (build, one generate of fresh requests) when its cache is cold; its seconds
    (build and generate by the harness's clock, the tree's cold start), or None when there was nothing to do. A
    failure is the tree's crash (its code ran). `forked` gives a worker forked from a warm server of its own (its
    sandbox shared with no other worker; its server's cache copy is written back when the server closes), else
    it is exec'd. `cold`: whether the cache was cold, as found before warm servers opened the tree's folder."""
    if not (cache_is_cold(launcher, root) if cold is None else cold):
        return None
    worker = (forked() if forked else None) or launcher.worker(side, root, log).spawn()
    try:
        worker.handshake()
        started = time.perf_counter()
        worker.request("build", spec=spec)
        rng = random.SystemRandom()
        worker.generate([[rng.choice(prompts), rng.randrange(2**31)] for _ in range(batch)], resolution=resolution)
        seconds = time.perf_counter() - started
        worker.note_start(seconds)
        return seconds
    finally:
        worker.close()  # an exec'd one's copy of the cache is written back into the tree's folder as it ends
