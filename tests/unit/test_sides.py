"""Sides[T] and Role (dit_ar_contract.sides): one value per side, read by role, written in the records' shape."""

from __future__ import annotations

import pytest

from dit_ar_contract.sides import ROLES, Role, Sides


def test_a_role_has_its_record_key_and_its_label() -> None:
    assert [(r.key, r.label) for r in ROLES] == [("cand", "candidate"), ("best", "best")]
    assert Role.CANDIDATE.other is Role.BEST and Role.BEST.other is Role.CANDIDATE
    assert Role.from_key("cand") is Role.from_key("candidate") is Role.CANDIDATE
    with pytest.raises(ValueError, match="no side is called 'baseline'"):
        Role.from_key("baseline")


def test_sides_are_read_by_role_and_mapped() -> None:
    times = Sides([0.1, 0.2], [0.3])
    assert times[Role.CANDIDATE] == [0.1, 0.2] and times[Role.BEST] == [0.3]
    assert times.map(len) == Sides(2, 1) and times.values() == ([0.1, 0.2], [0.3])
    assert dict(times.items()) == {Role.CANDIDATE: [0.1, 0.2], Role.BEST: [0.3]}
    assert Sides(1, 2).replace(Role.BEST, 5) == Sides(1, 5)
    fresh = Sides.of(lambda _: [])
    fresh.candidate.append(1)
    assert fresh.best == []  # each side got its own list


def test_sides_keep_the_records_dictionary_shape() -> None:
    assert Sides(1.0, 2.0).to_dict() == {"cand": 1.0, "best": 2.0}
    assert Sides(1.5, None).to_dict(skip_none=True) == {"cand": 1.5}
    assert Sides.from_dict({"cand": [1], "best": [2, 3]}, list) == Sides([1], [2, 3])
    assert Sides.from_dict({"best": 2.0}, float, 0.0) == Sides(0.0, 2.0)  # a side it lacks reads as the default
    assert Sides.from_dict(None, list, ()) == Sides([], [])
