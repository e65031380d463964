"""Compile caches per tree (worker/compile_cache.py): keys, warm starts, the sandbox mount, bounded disk use."""

from __future__ import annotations

import os
from pathlib import Path

from pytest_dit_ar.worker import sandbox
from pytest_dit_ar.worker.compile_cache import (
    CACHE_MOUNT,
    CacheEntry,
    CompileCaches,
    cache_env,
    plan_eviction,
    tree_digest,
)

MB = 2**20


def tree(tmp: Path, text: str) -> Path:
    (tmp / "model_under_test").mkdir(parents=True, exist_ok=True)
    (tmp / "model_under_test" / "__init__.py").write_text(text)
    return tmp


def test_the_digest_follows_the_tree_content_not_its_place_or_bytecode(tmp_path: Path):
    a = tree(tmp_path / "a", "x = 1\n")
    b = tree(tmp_path / "b", "x = 1\n")
    (b / "model_under_test" / "__pycache__").mkdir()
    (b / "model_under_test" / "__pycache__" / "m.pyc").write_bytes(b"junk")
    c = tree(tmp_path / "c", "x = 2\n")
    mutable = ("model_under_test/",)
    assert tree_digest(a, mutable) == tree_digest(b, mutable) != tree_digest(c, mutable)


def test_the_first_worker_of_a_tree_is_cold_every_later_one_warm(tmp_path: Path):
    caches = CompileCaches(tmp_path / "cc")
    folder, warm = caches.open("aaa")
    assert folder == tmp_path / "cc" / "aaa" and folder.is_dir() and not warm
    caches.note_start("aaa", 42.0, warm)
    _, warm2 = CompileCaches(tmp_path / "cc").open("aaa")  # a later experiment: a new harness process
    assert warm2
    caches.note_start("aaa", 3.0, warm2)
    rec = caches.record("aaa")
    assert rec.cold_start_s == 42.0 and rec.warm_start_s == [3.0] and rec.workers == 2


def test_the_record_lives_outside_the_mounted_folder(tmp_path: Path):
    caches = CompileCaches(tmp_path / "cc")
    folder, _ = caches.open("aaa")
    caches.note_peak("aaa", 1234.0)
    assert not any(folder.iterdir())  # nothing the harness trusts is inside what the worker can write
    assert caches.record("aaa").peak_gpu_mb == 1234.0


def test_the_env_points_inductor_triton_and_the_cuda_jit_cache_into_the_folder():
    env = cache_env(CACHE_MOUNT)
    for key in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH"):
        assert env[key].startswith(str(CACHE_MOUNT) + "/")


def test_the_sandbox_mounts_only_its_own_trees_cache_read_write(tmp_path: Path):
    (tmp_path / "state" / "compile-cache" / "aaa").mkdir(parents=True)
    # the project's folder exposed (its fixed files), so that its state folder is visible and must be hidden
    # (the allow-list root shows nothing that is not exposed)
    spec = sandbox.SandboxSpec(tmp_path / "tree", tmp_path / "scratch", hide=(tmp_path / "state",),
                               cache=tmp_path / "state" / "compile-cache" / "aaa", expose=(tmp_path,))
    cmd = sandbox.command(spec, ["true"], 3)
    i = cmd.index(str(tmp_path / "state" / "compile-cache" / "aaa"))
    assert cmd[i - 1] == "--bind" and cmd[i + 1] == str(CACHE_MOUNT)
    assert not any("compile-cache" in a and a != cmd[i] for a in cmd)  # no other cache folder is named
    hidden = cmd.index(str(tmp_path / "state"))
    assert cmd[hidden - 1] == "--tmpfs" and hidden < i  # the state (every other cache) is hidden first
    env = {cmd[k + 1]: cmd[k + 2] for k, a in enumerate(cmd) if a == "--setenv"}
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(CACHE_MOUNT / "inductor")
    assert "TORCHINDUCTOR_CACHE_DIR" not in {cmd[k + 1] for k, a in
                                             enumerate(sandbox.command(sandbox.SandboxSpec(tmp_path, tmp_path),
                                                                       ["true"], 3)) if a == "--setenv"}


def entries(*spec: tuple[str, float, int]) -> list[CacheEntry]:
    return [CacheEntry(d, t, s * MB) for d, t, s in spec]


def test_eviction_removes_the_oldest_until_it_fits():
    got = plan_eviction(entries(("a", 1, 100), ("b", 2, 100), ("c", 3, 100), ("d", 4, 100)), set(), 250 * MB, 1)
    assert got == ["a", "b"]


def test_eviction_never_removes_the_best_nor_the_recent():
    es = entries(("best", 1, 100), ("old", 2, 100), ("r1", 3, 100), ("r2", 4, 100))
    assert plan_eviction(es, {"best"}, 100 * MB, 2) == ["old"]  # still over budget: what is left is protected


def test_nothing_is_evicted_under_budget():
    assert plan_eviction(entries(("a", 1, 10), ("b", 2, 10)), set(), 100 * MB, 0) == []


def test_evict_deletes_folders_and_records_but_not_the_ones_in_use(tmp_path: Path):
    caches = CompileCaches(tmp_path / "cc", max_gb=1.5 / 1024, keep_recent=0)  # 1.5 MB
    for name in ("old", "new"):
        folder, _ = caches.open(name)
        (folder / "blob").write_bytes(b"x" * MB)
    fresh = CompileCaches(tmp_path / "cc", max_gb=1.5 / 1024, keep_recent=0)
    fresh.in_use = {"new"}
    (tmp_path / "cc" / "old").mkdir(exist_ok=True)
    (tmp_path / "cc" / "old" / "blob").write_bytes(b"x" * MB)
    assert fresh.evict() == ["old"]
    assert not (tmp_path / "cc" / "old").exists() and not (tmp_path / "cc" / "old.json").exists()
    assert (tmp_path / "cc" / "new" / "blob").exists()


def test_the_best_is_protected_even_when_it_is_not_recent(tmp_path: Path):
    caches = CompileCaches(tmp_path / "cc", max_gb=1.5 / 1024, keep_recent=0)
    for name in ("best", "c1", "c2"):
        folder, _ = caches.open(name)
        (folder / "blob").write_bytes(b"x" * MB)
    later = CompileCaches(tmp_path / "cc", max_gb=1.5 / 1024, keep_recent=0)
    later.in_use.add("best")  # Evidence.protect_best_cache
    later.evict()
    assert (tmp_path / "cc" / "best" / "blob").exists()


def kept_best(caches: CompileCaches, files: dict[str, bytes]) -> Path:
    """The best's tree folder as its first worker left it (its start recorded), held as the seed."""
    folder, warm = caches.open("best")
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    caches.note_start("best", 30.0, warm)
    caches.hold_best("best", seed=True)
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_new_trees_folder_starts_as_a_copy_of_the_bests(tmp_path: Path):
    caches = CompileCaches(tmp_path / "cc")
    kept_best(caches, {"inductor/fxgraph/k1": b"graph", "triton/kern.so": b"kernel"})
    folder, warm = caches.open("cand")
    assert not warm  # its own first worker still writes it (compile pool kept; later workers get copies)
    assert snapshot(folder) == {"inductor/fxgraph/k1": b"graph", "triton/kern.so": b"kernel"}
    assert caches.record("cand").seeded_from == "best"
    assert not (folder / "triton" / "kern.so").is_symlink()
    assert caches.in_use >= {"best", "cand"}
    assert not [p for p in (tmp_path / "cc").iterdir() if p.name.startswith(".seed-")]  # no partial copy left
    _, warm2 = caches.open("cand")  # a later worker of the tree: warm, not seeded again
    assert warm2 and caches.record("cand").seeded_from == "best"


def test_the_bests_folder_is_untouched_by_what_the_candidates_worker_writes(tmp_path: Path):
    caches = CompileCaches(tmp_path / "cc")
    best = kept_best(caches, {"inductor/fxgraph/k1": b"graph"})
    before = snapshot(best)
    folder, _ = caches.open("cand")
    (folder / "inductor" / "fxgraph" / "k1").write_bytes(b"poison")  # the candidate overwrites a shared entry
    (folder / "inductor" / "fxgraph" / "k2").write_bytes(b"new graph")
    assert snapshot(best) == before
    assert caches.record("best").seeded_from is None and caches.record("best").workers == 1


def test_links_in_the_bests_folder_are_copied_as_links_never_followed(tmp_path: Path):
    secret = tmp_path / "host-secret"
    secret.write_text("host data")
    caches = CompileCaches(tmp_path / "cc")
    best = kept_best(caches, {"a": b"x"})
    (best / "link").symlink_to(secret)
    folder, _ = caches.open("cand")
    assert (folder / "link").is_symlink() and os.readlink(folder / "link") == str(secret)


def test_a_missing_unfinished_or_unreadable_best_folder_means_a_cold_start(tmp_path: Path):
    caches = CompileCaches(tmp_path / "cc")
    caches.hold_best("gone", seed=True)  # no folder at all
    folder, warm = caches.open("c1")
    assert not warm and not any(folder.iterdir()) and caches.record("c1").seeded_from is None
    unfinished, _ = caches.open("busy")  # its first worker has not finished its first generate
    (unfinished / "half").write_bytes(b"x")
    caches.hold_best("busy", seed=True)
    folder, _ = caches.open("c2")
    assert not any(folder.iterdir()) and caches.record("c2").seeded_from is None
    best = kept_best(caches, {"ok": b"x"})
    os.mkfifo(best / "pipe")  # a special file: the copy fails (never blocks), the candidate starts cold
    folder, warm = caches.open("c3")
    assert not warm and folder.is_dir() and not any(folder.iterdir()) and caches.record("c3").seeded_from is None
    assert not [p for p in (tmp_path / "cc").iterdir() if p.name.startswith(".seed-")]


def test_reuse_off_means_no_seed(tmp_path: Path):
    caches = CompileCaches(tmp_path / "cc")
    kept_best(caches, {"a": b"x"})
    caches.hold_best("best", seed=False)  # performance.reuse = false
    folder, _ = caches.open("cand")
    assert not any(folder.iterdir()) and caches.record("cand").seeded_from is None


def test_a_folder_unopened_makes_the_next_worker_its_first_again(tmp_path: Path):
    caches = CompileCaches(tmp_path / "cc")
    caches.open("aaa")  # a warm server staged for the first worker that then could not fork it
    caches.unopen("aaa")
    folder, warm = caches.open("aaa")
    assert not warm and folder.is_dir()  # the exec'd first worker is the cold one, and its copy is written back


class _FirstWorker:
    """What fill_cache asks of a first worker: a hello, a build, one generate, its start noted, a close."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def handshake(self) -> None:
        self.calls.append("hello")

    def request(self, op: str, **_: object) -> None:
        self.calls.append(op)

    def generate(self, requests: list, resolution: int | None = None) -> None:
        self.calls.append(f"generate {len(requests)}")

    def note_start(self, seconds: float) -> None:
        self.calls.append("noted")

    def close(self) -> None:
        self.calls.append("closed")


def test_a_cold_tree_s_first_worker_is_the_forked_one_when_a_server_gives_it(tmp_path: Path):
    from types import SimpleNamespace

    from pytest_dit_ar.loop.workers import first_worker

    forked = _FirstWorker()
    launcher = SimpleNamespace(caches=None, worker=lambda *a: (_ for _ in ()).throw(AssertionError("exec'd")))
    seconds = first_worker.fill_cache(launcher, "candidate", tmp_path, {}, ("a cat",), 2, 64,  # type: ignore[arg-type]
                                      tmp_path / "first.log", forked=lambda: forked, cold=True)  # type: ignore[arg-type,return-value]
    assert seconds is not None and forked.calls == ["hello", "build", "generate 2", "noted", "closed"]
    # a warm tree (decided before the servers opened its folder) runs none, forked or not
    assert first_worker.fill_cache(launcher, "candidate", tmp_path, {}, ("a cat",), 2, 64,  # type: ignore[arg-type]
                                   tmp_path / "first.log", forked=lambda: _FirstWorker(), cold=False) is None  # type: ignore[arg-type,return-value]
