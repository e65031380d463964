"""The GPU figures the README and the speed-verdict design page quote are the recorded night's
(lab/data/h200/night-20261207/summary.json, written by lab/device/ladder_summary.py on the device)."""

from __future__ import annotations

import json

from tests.helpers.loop import PROJECT

NIGHT = json.loads((PROJECT / "lab" / "data" / "h200" / "night-20261207" / "summary.json").read_text())


def test_the_readme_quotes_the_recorded_night() -> None:
    readme = (PROJECT / "README.md").read_text()
    keep = next(e for e in NIGHT["experiments"] if e["status"] == "keep")
    look = keep["look"]
    assert f"+{keep['estimate_pct']:.1f}% [+{look['lower_pct']:.1f}, +{look['upper_pct']:.1f}]" in readme
    noops = [f"{n['estimate_pct']:+.2f}%" for n in NIGHT["night"]["noops"]]
    assert f"two no-ops ({noops[0]}, {noops[1]})" in readme
    assert all(n["status"] != "keep" for n in NIGHT["night"]["noops"])
    slow = next(e for e in NIGHT["experiments"] if e["description"].startswith("a slowdown"))
    assert f"slowdown ({slow['estimate_pct']:.1f}%)" in readme
    assert f"{NIGHT['night']['per_hour_own_wall']:.0f} judged experiments per hour" in readme


def test_the_design_page_quotes_the_recorded_phases() -> None:
    page = (PROJECT / "docs" / "design" / "speed-verdict.md").read_text()
    keep = next(e for e in NIGHT["experiments"] if e["status"] == "keep")
    assert f"{keep['wall_s']:.1f} s on the sampling graph's KEEP" in page
    noop_walls = sorted(f"{e['wall_s']:.1f}" for e in NIGHT["experiments"] if e["description"].startswith("a no-op"))
    assert f"{noop_walls[0]} and {noop_walls[1]} s on two no-ops" in page
