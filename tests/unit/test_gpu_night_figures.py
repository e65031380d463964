"""The GPU figures the README and the speed-verdict design page quote are the recorded nights'
(lab/data/h100/night-20261207/summary.json, written by lab/device/ladder_summary.py on the device: the session from
the shipped model)."""

from __future__ import annotations

import json

from tests.helpers.loop import PROJECT

NIGHT = json.loads((PROJECT / "lab" / "data" / "h100" / "night-20261207" / "summary.json").read_text())
LATER = json.loads((PROJECT / "lab" / "data" / "h100" / "night-20261207c" / "summary.json").read_text())
GRAPH = "one CUDA graph for the whole sampling loop"


def test_the_readme_quotes_the_recorded_night() -> None:
    readme = " ".join((PROJECT / "README.md").read_text().split())
    chain = NIGHT["chain"]
    assert f"{chain['baseline_ms']:.0f} to {chain['best_ms']:.1f} ms a batch" in readme
    assert f"{chain['absolute_ratio']:.1f}x ({chain['chained_paired_ratio']:.1f}x as the product" in readme
    assert chain["kept_steps"] == 6 and "kept the first six steps" in readme
    assert all(e["status"] == "keep" for e in NIGHT["experiments"] if not e["description"].startswith("a "))
    noops = [f"{n['estimate_pct']:+.2f}%" for n in NIGHT["night"]["noops"]]
    assert f"two no-ops ({noops[0]}, {noops[1]})" in readme
    assert all(n["status"] != "keep" for n in NIGHT["night"]["noops"])
    slow = next(e for e in NIGHT["experiments"] if e["description"].startswith("a slowdown"))
    assert f"slowdown ({slow['estimate_pct']:.1f}%)" in readme and slow["status"] != "keep"
    assert f"{NIGHT['night']['per_hour_own_wall']:.0f} judged experiments per hour" in readme


def test_the_readme_quotes_the_later_session_s_whole_plan() -> None:
    readme = " ".join((PROJECT / "README.md").read_text().split())
    night = LATER["night"]
    assert night["noops_discarded"] == len(night["noops"]) == 6 and "six no-ops (all discarded after one pair" in readme
    assert night["noops_excluding_zero_beyond_bound"] == 0
    assert f"median {night['noop_median_pct']:+.2f}%" in readme
    assert sum(e["description"].startswith("a slowdown") and e["status"] != "keep" for e in LATER["experiments"]) == 2
    assert any(e["status"] == "discard-quality" for e in LATER["experiments"])
    assert f"{night['per_hour_own_wall']:.0f} judged experiments per hour of their own wall time, " \
           f"{night['per_hour_session']:.0f} per hour of the session" in readme


def test_the_design_page_quotes_the_recorded_phases() -> None:
    page = " ".join((PROJECT / "docs" / "design" / "speed-verdict.md").read_text().split())
    keep = next(e for e in NIGHT["experiments"] if e["description"].startswith(GRAPH))
    assert keep["status"] == "keep" and f"{keep['wall_s']:.1f} s on the sampling graph's KEEP" in page
    noops = [e for e in NIGHT["experiments"] if e["description"].startswith("a no-op")]
    walls = " and ".join(f"{e['wall_s']:.1f}" for e in noops)
    assert f"{walls} s on two no-ops" in page
    bound = NIGHT["night"]["noops"][0]["bound_pct"]
    assert f"B fell to {bound:.2f}%" in page


def _first_worker_overheads(night: str) -> list[float]:
    """Each experiment's first worker less its tree's cold start (its process start, or its fork), by the records."""
    out = []
    for record in sorted((PROJECT / "lab" / "data" / "h100" / night).rglob("*-experiment.json")):
        seconds = json.loads(record.read_text())["seconds"]
        perf = json.loads(record.with_name(record.name.replace("experiment", "perf")).read_text())
        out.append(seconds["first_worker"] - perf["startup"]["cand_cold_start_s"])
    return out


def test_the_design_page_quotes_the_first_worker_s_start_before_and_with_its_warm_server() -> None:
    page = " ".join((PROJECT / "docs" / "design" / "speed-verdict.md").read_text().split())
    before, after = _first_worker_overheads("night-20261207"), _first_worker_overheads("night-20261207b")
    assert f"spent {min(before):.1f}-{max(before):.1f} s starting before its build" in page
    assert len(after) == 3 and f"with its own warm server, {min(after):.1f}-{max(after):.1f} s" in page
    assert max(after) < min(before) / 10  # what the slots bought, on the records themselves
