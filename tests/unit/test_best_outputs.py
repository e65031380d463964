"""The best's stored corpus outputs (state/best_outputs.py): used only when signed, intact and current; a tampered
or stale entry is refused and deleted, never trusted."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch

from pytest_dit_ar.state import best_outputs
from pytest_dit_ar.state.best_outputs import OutputsKey, StoredOutputs

SECRET = "session-secret"
KEY = OutputsKey(tree="t" * 32, lane_id="embedded-cpu@cpu", seed_key_sha256="s" * 64, steps=4,
                 corpus_sha256="c" * 64, baseline_sha256="b" * 64, lane_sha256="l" * 64)


def stored() -> StoredOutputs:
    g = torch.Generator().manual_seed(0)
    images = {"c1": torch.rand(3, 8, 8, generator=g), "c2": torch.rand(3, 8, 8, generator=g)}
    latents = {k: torch.rand(4, 2, 2, generator=g) for k in images}
    return StoredOutputs(images, latents, {"inspection": {}}, {"declared_class": "exact"}, "exact")


def paths(tmp: Path) -> tuple[Path, Path]:
    return best_outputs._paths(tmp, KEY.lane_id)


def test_a_stored_entry_comes_back_verified_and_identical(tmp_path: Path) -> None:
    best_outputs.store(tmp_path, SECRET, KEY, stored())
    found = best_outputs.load(tmp_path, SECRET, KEY)
    assert found.stored is not None, found.why
    assert best_outputs.identical(found.stored, stored().images, stored().latents)
    assert found.stored.assessment == {"declared_class": "exact"} and found.stored.inherited_class == "exact"


def test_one_changed_element_is_not_identical(tmp_path: Path) -> None:
    entry = stored()
    images = {k: v.clone() for k, v in entry.images.items()}
    images["c2"][0, 0, 0] = torch.nextafter(images["c2"][0, 0, 0], torch.tensor(2.0))
    assert not best_outputs.identical(entry, images, entry.latents)
    assert not best_outputs.identical(entry, {"c1": entry.images["c1"]}, entry.latents)  # a case missing


def test_a_tampered_file_is_refused_and_deleted(tmp_path: Path) -> None:
    best_outputs.store(tmp_path, SECRET, KEY, stored())
    data, index = paths(tmp_path)
    forged = stored()
    forged.images["c1"].zero_()
    torch.save({"images": forged.images, "latents": forged.latents, "evidence": "{}",
                "assessment": json.dumps({"declared_class": "exact"}), "inherited": "exact"}, data)
    found = best_outputs.load(tmp_path, SECRET, KEY)
    assert found.stored is None and "tampered" in found.why
    assert not data.exists() and not index.exists()


def test_a_re_hashed_file_without_the_secret_is_refused(tmp_path: Path) -> None:
    """An attacker who rewrites both the file and its digest still cannot sign the index without the secret."""
    best_outputs.store(tmp_path, SECRET, KEY, stored())
    data, index = paths(tmp_path)
    data.write_bytes(data.read_bytes() + b"\0")
    entry = json.loads(index.read_text())
    entry["sha256"] = best_outputs.sha256_file(data)
    entry["hmac"] = best_outputs._sign("a guess", KEY, entry["sha256"])
    index.write_text(json.dumps(entry))
    found = best_outputs.load(tmp_path, SECRET, KEY)
    assert found.stored is None and "signature" in found.why and not data.exists()


def test_a_stale_entry_names_what_changed_and_is_deleted(tmp_path: Path) -> None:
    best_outputs.store(tmp_path, SECRET, KEY, stored())
    for change in ({"tree": "u" * 32}, {"steps": 8}):
        best_outputs.store(tmp_path, SECRET, KEY, stored())
        found = best_outputs.load(tmp_path, SECRET, replace(KEY, **change))
        assert found.stored is None and "stale" in found.why and next(iter(change)) in found.why
        assert not paths(tmp_path)[0].exists()


def test_a_different_session_secret_refuses_the_entry(tmp_path: Path) -> None:
    best_outputs.store(tmp_path, SECRET, KEY, stored())
    assert best_outputs.load(tmp_path, "another session", KEY).stored is None


def test_absent_or_malformed_index_is_no_entry(tmp_path: Path) -> None:
    assert best_outputs.load(tmp_path, SECRET, KEY).stored is None
    best_outputs.store(tmp_path, SECRET, KEY, stored())
    paths(tmp_path)[1].write_text(json.dumps({"key": {"tree": "x"}, "sha256": best_outputs.sha256_file(
        paths(tmp_path)[0])}))
    found = best_outputs.load(tmp_path, SECRET, KEY)
    assert found.stored is None and "malformed" in found.why


def test_an_entry_another_session_left_is_not_reusable_here_and_not_called_tampered(tmp_path: Path) -> None:
    """A new session in the same repository (a new tag on the same baseline) finds the earlier session's entry:
    signed under that session's secret for that session's seed key. Not an alarm: not reusable here, deleted."""
    earlier = replace(KEY, seed_key_sha256="e" * 64)
    best_outputs.store(tmp_path, "the earlier session's secret", earlier, stored())
    found = best_outputs.load(tmp_path, SECRET, KEY)
    assert found.stored is None and "another session's key" in found.why and "tampered" not in found.why
    assert not any(p.exists() for p in paths(tmp_path))


def test_a_signature_that_fails_within_its_own_session_is_tampered(tmp_path: Path) -> None:
    best_outputs.store(tmp_path, SECRET, KEY, stored())
    index = paths(tmp_path)[1]
    entry = json.loads(index.read_text())
    entry["hmac"] = "0" * 64
    index.write_text(json.dumps(entry))
    found = best_outputs.load(tmp_path, SECRET, KEY)
    assert found.stored is None and "tampered" in found.why and "another session" not in found.why
