"""The experiment summary names the statistic of each speed figure, one figure per line."""

from __future__ import annotations

from dataclasses import dataclass

from dit_ar_contract.sides import Role
from perf_suite.sequential import Look
from pytest_dit_ar.plugin.summary import speed_lines


@dataclass
class Perf:
    look: Look
    cand_ms: float
    best_ms: float
    reasons: tuple[str, ...] = ()

    def median_ms(self, role: Role) -> float:
        return self.cand_ms if role is Role.CANDIDATE else self.best_ms


@dataclass
class Lane:
    gpus: int = 1

    def gpu_seconds_per_image(self, ms: float) -> float | None:
        return None


def look(estimate: float) -> Look:
    return Look(segments=2, rounds=48, decision="not-faster", estimate_pct=estimate, lower_pct=estimate - 5,
                upper_pct=estimate + 5, z=1.0, boundary=2.5, standard_error=0.03, offset_sd=0.01)


def test_each_speed_figure_has_its_own_line_and_its_statistic() -> None:
    lines = speed_lines(Perf(look(-13.21), 287.1, 300.4), Lane())
    speed, cand, best = lines[:3]
    assert "-13.21%" in speed and "paired estimate" in speed and "ms" not in speed
    assert "287.1 ms" in cand and "median" in cand and "300.4" not in cand
    assert "300.4 ms" in best and "median" in best and "287.1" not in best


def test_medians_that_disagree_with_the_paired_estimate_are_explained() -> None:
    disagree = speed_lines(Perf(look(-13.21), 287.1, 300.4), Lane())
    assert any("disagree" in line for line in disagree)
    agree = speed_lines(Perf(look(+4.0), 287.1, 300.4), Lane())
    assert not any("disagree" in line for line in agree)
