"""Integrity snapshots of the fixed files and the baseline manifest: what changed is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from dit_ar_contract.errors import Refused
from pytest_dit_ar.state import integrity
from pytest_dit_ar.state.baseline import manifest_problems, verify_baseline
from pytest_dit_ar.state.files import write_json_atomic


def tree(root: Path) -> None:
    (root / "fixed" / "__pycache__").mkdir(parents=True)
    (root / "fixed" / "a.py").write_text("a = 1\n")
    (root / "fixed" / "__pycache__" / "a.cpython.pyc").write_bytes(b"\0")
    (root / "single.md").write_text("doc\n")


def test_snapshot_skips_caches_and_diff_names_every_change(tmp_path: Path) -> None:
    tree(tmp_path)
    before = integrity.snapshot(tmp_path, ["fixed/", "single.md", "absent/"])
    assert sorted(before) == ["fixed/a.py", "single.md"]
    (tmp_path / "fixed" / "a.py").write_text("a = 2\n")
    (tmp_path / "fixed" / "b.py").write_text("")
    (tmp_path / "single.md").unlink()
    after = integrity.snapshot(tmp_path, ["fixed/", "single.md"])
    assert integrity.diff(before, after) == ["changed: fixed/a.py", "missing: single.md", "added: fixed/b.py"]


def test_a_symlink_is_hashed_as_a_link_not_as_its_target(tmp_path: Path) -> None:
    (tmp_path / "target.txt").write_text("x")
    (tmp_path / "fixed").mkdir()
    (tmp_path / "fixed" / "link").symlink_to(tmp_path / "target.txt")
    before = integrity.snapshot(tmp_path, ["fixed/"])
    (tmp_path / "target.txt").write_text("y")
    assert integrity.snapshot(tmp_path, ["fixed/"]) == before


def baseline_folder(folder: Path) -> str:
    (folder / "cases").mkdir(parents=True)
    (folder / "cases" / "c1.png").write_bytes(b"png")
    write_json_atomic(folder / "baseline.json", {"lane": "l", "lane_id": "l", "commit": "c", "run_id": "r",
                                                 "created": "t", "cases": ["c1"], "corpus_sha256": "s",
                                                 "workload": {}, "environment": {}, "evidence": {}, "envelope": {},
                                                 "envelope_runs": {}, "task_metrics": {}, "task_case_pass": {},
                                                 "timing": {"median_ms": 5.0}})
    write_json_atomic(folder / integrity.MANIFEST, {"files": integrity.manifest_of(folder)})
    from dit_ar_contract.digest import sha256_file

    return sha256_file(folder / integrity.MANIFEST)


def test_baseline_manifest_check_passes_then_names_tampering(tmp_path: Path) -> None:
    folder = tmp_path / "baseline" / "l"
    recorded = baseline_folder(folder)
    assert manifest_problems(folder) == []
    assert verify_baseline(folder, "l", recorded).timing.median_ms == 5.0
    (folder / "cases" / "c1.png").write_bytes(b"other")
    assert manifest_problems(folder) == ["changed: cases/c1.png"]
    with pytest.raises(Refused, match="does not match its manifest"):
        verify_baseline(folder, "l", recorded)


def test_a_rewritten_manifest_is_caught_by_the_session_s_copy_of_its_hash(tmp_path: Path) -> None:
    folder = tmp_path / "baseline" / "l"
    recorded = baseline_folder(folder)
    (folder / "cases" / "c1.png").write_bytes(b"forged")
    write_json_atomic(folder / integrity.MANIFEST, {"files": integrity.manifest_of(folder)})  # consistent again
    assert manifest_problems(folder) == []
    with pytest.raises(Refused, match="tampered"):
        verify_baseline(folder, "l", recorded)


def test_no_manifest_means_no_baseline(tmp_path: Path) -> None:
    assert manifest_problems(tmp_path) is None
    with pytest.raises(Refused, match="run `dit-ar baseline` first"):
        verify_baseline(tmp_path, "l", None)


def test_a_damaged_baseline_is_restored_from_its_saved_copy(tmp_path: Path) -> None:
    """`dit-ar recover`'s state step: the saved files come back and a file the manifest does not list goes."""
    import git

    from pytest_dit_ar.state import backup

    repo = git.Repo.init(tmp_path)
    folder = tmp_path / ".autoresearch" / "baseline"
    (folder / "cases").mkdir(parents=True)
    (folder / "cases" / "a.txt").write_text("reference\n")
    write_json_atomic(folder / integrity.MANIFEST, {"files": integrity.manifest_of(folder)})
    ref = "refs/dit-ar/test-baseline"
    backup.save_folder(repo, folder, ref, "baseline")
    (folder / "cases" / "a.txt").write_text("tampered\n")
    (folder / "cases" / "planted.txt").write_text("extra\n")
    backup.restore_baseline(repo, folder, ref)
    assert (folder / "cases" / "a.txt").read_text() == "reference\n"
    assert not (folder / "cases" / "planted.txt").exists() and manifest_problems(folder) == []
