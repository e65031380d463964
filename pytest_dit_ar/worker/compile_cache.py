"""Compile caches per commit tree, owned by the harness (docs/design/sandbox-and-security.md, "Compile caches").

torch.compile writes its Inductor cache (FX graphs, AOTAutograd, generated C++/Triton code, under
$TORCHINDUCTOR_CACHE_DIR, default $TMPDIR/torchinductor_$USER), Triton's compiled kernels ($TRITON_CACHE_DIR,
default ~/.triton/cache) and, on CUDA, the driver's PTX JIT cache ($CUDA_CACHE_PATH, default ~/.nv/ComputeCache).
A sandbox's HOME and TMPDIR are its private scratch, so without this module every worker compiles from nothing.

Here every tree of the mutable paths (a content digest of the files a side's sandbox shows) has one folder,
`.autoresearch/compile-cache/<digest>/`, and its record next to it, `<digest>.json`, written by the harness
only. A sandboxed worker sees exactly its own tree's folder, read-write, at CACHE_MOUNT; no other cache folder
is visible (the state folder is hidden), so a candidate cannot read or poison the best's cache. Every later
worker of the same tree, the best's in later experiments included, starts warm from it. Disk use is bounded:
folders neither in use by the running experiment nor among the most recently used are evicted, oldest first,
until the total fits `performance.compile_cache_gb`.

A new tree's folder starts as the harness's copy of the current best's folder (`seed`, set by the experiment
unless `performance.reuse` is off), so that every graph the candidate shares with the best loads instead of
compiling; the best's folder is only read, on the host, and a missing or unreadable one means a cold start.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

CACHE_MOUNT = Path("/tmp/dit-ar/cache")  # where a sandboxed worker sees its tree's cache folder
RECORD_SUFFIX = ".json"
# A worker that finds its tree's cache filled compiles in its own process, with no pool of Inductor compile
# subprocesses: loading cached graphs starts that pool (a Python process per core, each importing torch) while
# the worker's rounds are timed. Measured on the H200: forked regional-compile rounds 300-509 ms with the pool
# against 267-287 ms without; a warm-cache exec'd regional-compile best 327-480 ms with it, where the forked
# pairs of the same tree ran 269-304 ms. Forked workers always compile in process (their zygote's environment);
# a cold exec'd worker keeps the pool for its first compile, which is idle again by its timed rounds.
COMPILE_IN_PROCESS = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}


def cache_env(folder: Path) -> dict[str, str]:
    """The environment that points every compile cache torch writes at `folder` (as the worker sees it)."""
    return {"TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor"), "TRITON_CACHE_DIR": str(folder / "triton"),
            "CUDA_CACHE_PATH": str(folder / "nv"), "TORCH_EXTENSIONS_DIR": str(folder / "extensions"),
            "TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}


def tree_digest(root: Path, mutable: Iterable[str]) -> str:
    """sha256 over the mutable paths' files under `root` (relative path and bytes, sorted; bytecode left out):
    the same for a worktree and the staged copy a sandbox shows of it."""
    h = hashlib.sha256()
    for rel in mutable:
        base = root / rel.rstrip("/")
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else []
        for path in files:
            if "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            name = path.relative_to(root).as_posix().encode()
            h.update(len(name).to_bytes(4, "big") + name)
            data = path.read_bytes()
            h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()[:32]


@dataclass
class TreeRecord:
    """What the harness knows about one tree's workers (written by the harness; never inside the mounted folder)."""

    digest: str
    last_used: float = 0.0
    workers: int = 0  # workers started with this folder so far (the first one starts cold)
    cold_start_s: float | None = None  # build + warm-up of the first worker of the tree
    warm_start_s: list[float] = field(default_factory=list)  # later workers' build + warm-up (last few)
    peak_gpu_mb: float | None = None  # the largest device memory one worker of the tree used (NVML, sampled)
    seeded_from: str | None = None  # the best's tree whose folder the harness copied to start this one's


@dataclass(frozen=True)
class CacheEntry:
    digest: str
    last_used: float
    size_bytes: int


def plan_eviction(entries: list[CacheEntry], protected: set[str], max_bytes: int, keep_recent: int) -> list[str]:
    """Digests to delete: oldest first, never a protected one nor one of the `keep_recent` most recently used,
    until the rest fits `max_bytes` (a pure function)."""
    by_age = sorted(entries, key=lambda e: e.last_used, reverse=True)
    recent = {e.digest for e in by_age[:keep_recent]}
    total = sum(e.size_bytes for e in entries)
    evict: list[str] = []
    for entry in reversed(by_age):  # oldest first
        if total <= max_bytes:
            break
        if entry.digest in protected or entry.digest in recent:
            continue
        evict.append(entry.digest)
        total -= entry.size_bytes
    return evict


def folder_size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


class CompileCaches:
    """The session's cache folders, one per tree digest, with their records."""

    def __init__(self, root: Path, max_gb: float = 20.0, keep_recent: int = 4):
        self.root, self.max_bytes, self.keep_recent = root, int(max_gb * 2**30), keep_recent
        self.in_use: set[str] = set()  # digests this process's workers use (never evicted while it runs)
        self.seed: str | None = None  # the best's tree: a new tree's folder starts as a copy of its folder

    def folder(self, digest: str) -> Path:
        return self.root / digest

    def record(self, digest: str) -> TreeRecord:
        path = self.root / (digest + RECORD_SUFFIX)
        try:
            data = json.loads(path.read_text())
            return TreeRecord(**{k: v for k, v in data.items() if k in TreeRecord.__dataclass_fields__})
        except (OSError, ValueError, TypeError):
            return TreeRecord(digest)

    def save(self, rec: TreeRecord) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / (rec.digest + RECORD_SUFFIX)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(rec), indent=1))
        os.replace(tmp, path)

    def unopen(self, digest: str) -> None:
        """Forget the workers that opened the tree's folder: the next one to open it is its first (a warm server
        staged for the first worker that could not fork it; the folder itself is kept)."""
        rec = self.record(digest)
        rec.workers = 0
        self.save(rec)

    def open(self, digest: str) -> tuple[Path, bool]:
        """The tree's folder for a new worker (created, evicting others if over budget) and whether it starts
        warm (an earlier worker of the tree used it)."""
        self.in_use.add(digest)
        rec = self.record(digest)
        warm = rec.workers > 0 and self.folder(digest).is_dir()
        rec.workers = rec.workers + 1 if warm else 1
        rec.last_used = time.time()
        folder = self.folder(digest)
        if not warm and not folder.exists():
            rec.seeded_from = self.seed_into(folder, digest)
        folder.mkdir(parents=True, exist_ok=True)
        self.save(rec)
        self.evict()
        return folder, warm

    def hold_best(self, digest: str, seed: bool) -> None:
        """The best's folder is never evicted while this process runs; with `seed`, a new tree's starts as its copy."""
        self.in_use.add(digest)
        self.seed = digest if seed else None

    def seed_into(self, folder: Path, digest: str) -> str | None:
        """Fill a new tree's folder with a copy of the best's (the seed's), made here on the host; returns the
        seed's digest, or None (a cold start) when there is no seed, it is this tree, its first worker has not
        finished its first generate (its folder may still be filling), or the copy fails."""
        seed = self.seed
        source = self.folder(seed) if seed else None
        if seed is None or source is None or seed == digest or not source.is_dir():
            return None
        if self.record(seed).cold_start_s is None:
            return None
        self.root.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=".seed-", dir=self.root))
        try:  # links copied as links, never followed; a FIFO or other special file fails the copy
            shutil.copytree(source, partial / "copy", symlinks=True)
            os.replace(partial / "copy", folder)
        except OSError:  # shutil.Error included
            return None
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        return seed

    def note_start(self, digest: str, seconds: float, warm: bool) -> None:
        """Record one worker's start-up (build + warm-up) as cold or warm."""
        rec = self.record(digest)
        if warm:
            rec.warm_start_s = (rec.warm_start_s + [seconds])[-8:]
        elif rec.cold_start_s is None:
            rec.cold_start_s = seconds
        self.save(rec)

    def note_peak(self, digest: str, peak_mb: float | None) -> None:
        if peak_mb is None:
            return
        rec = self.record(digest)
        rec.peak_gpu_mb = max(rec.peak_gpu_mb or 0.0, peak_mb)
        self.save(rec)

    def entries(self) -> list[CacheEntry]:
        if not self.root.is_dir():
            return []
        return [CacheEntry(p.name, self.record(p.name).last_used, folder_size(p))
                for p in self.root.iterdir() if p.is_dir()]

    def evict(self, protected: set[str] | None = None) -> list[str]:
        """Delete the folders plan_eviction names (with their records); returns their digests."""
        gone = plan_eviction(self.entries(), self.in_use | (protected or set()), self.max_bytes, self.keep_recent)
        for digest in gone:
            shutil.rmtree(self.folder(digest), ignore_errors=True)
            (self.root / (digest + RECORD_SUFFIX)).unlink(missing_ok=True)
        return gone
