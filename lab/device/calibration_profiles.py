"""Print what `dit-ar calibrate` would store for each study file of a device calibration run (the profile of
`pytest_dit_ar.loop.speed.calibration.profile_of` and its lines), for lab/device/calibrate.sh:

    python3 lab/device/calibration_profiles.py DIR LANE NAME [NAME ...]     # reads DIR/NAME.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dit_ar_contract.config import load_config
from perf_suite.sequential import Design
from perf_suite.studies import StudyResults
from pytest_dit_ar.loop.speed.calibration import Collected, describe, profile_of


def main(folder: Path, lane_id: str, names: list[str]) -> None:
    lane = load_config("config/autoresearch.json").lanes[lane_id]
    for name in names:
        path = folder / f"{name}.json"
        if not path.is_file():
            print(f"{name}: no data")
            continue
        res = StudyResults.read(path)
        null = res.null
        forked = sum(bool(p.forked) for p in null)
        ended = res.stopped or "complete"
        print(f"== {name}: {len(null)} A/A pairs ({forked} forked), wall {res.wall_s:.0f} s, {ended}")
        for arm in res.arms.values():
            print(f"   arm {arm.name}: {len(arm.pairs)} pairs")
        if len(null) < 2:
            continue
        prof = profile_of(Collected(res, len(null)), lane_id, name, lane.performance, "latency_ms")
        print("\n".join(describe(prof, Design.from_protocol(lane.performance, "latency_ms"))))
        print(json.dumps(prof.as_dict()))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
