"""What `dit-ar calibrate` says of one calibration run's A/A pairs read at several pair lengths: the first N
rounds of every pair (N = the lane's old 16, as a calibration of 16-round pairs would have measured) and all of
them (the longer pairs of `performance.calibration_rounds`), for lab/device/eager_power.sh:

    python3 lab/device/eager_power_profiles.py CALIBRATION.json LANE [CUT ...]     # CUT: rounds per pair

Each cut prints the profile's lines (the noise, the rounds a win needs, the power within the lane's design and
what to change) and the profile as JSON. A run cut short by its budget is read as far as it got.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from dit_ar_contract.config import load_config
from perf_suite.sequential import Design
from perf_suite.studies import NULL, StudyResults
from pytest_dit_ar.loop.speed.calibration import Collected, describe, profile_of
from pytest_dit_ar.loop.speed.pairs import timed_cores


def cut(res: StudyResults, rounds: int | None) -> StudyResults:
    """The results with every A/A pair's first `rounds` rounds only (None: as measured)."""
    if rounds is None:
        return res
    null = res.arms[NULL]
    pairs = tuple(dataclasses.replace(p, cand_s=p.cand_s[:rounds], best_s=p.best_s[:rounds],
                                      orders=p.orders[:rounds]) for p in null.pairs)
    return dataclasses.replace(res, arms={**res.arms, NULL: dataclasses.replace(null, pairs=pairs)})


def main(path: Path, lane_name: str, cuts: list[int | None]) -> int:
    lane = load_config("config/autoresearch.json").lanes[lane_name]
    protocol = lane.performance
    res = StudyResults.read(path)
    null = res.null
    print(f"== {path.name}: {len(null)} A/A pairs of {min((len(p.cand_s) for p in null), default=0)} rounds, "
          f"wall {res.wall_s:.0f} s, {res.stopped or 'complete'}")
    if len(null) < 2:
        print("fewer than 2 A/A pairs: no spread, no profile")
        return 1
    design = Design.from_protocol(protocol, lane.primary_metric)
    one_core = not lane.is_cuda or len(timed_cores(protocol, lane.is_cuda) or ()) == 1
    for rounds in cuts:
        part = cut(res, rounds)
        prof = profile_of(Collected(part, len(part.null)), lane_name, "device", protocol, lane.primary_metric)
        print(f"-- the first {prof.rounds} rounds of each pair")
        print("\n".join(describe(prof, design, one_core, protocol.bound_confidence)))
        print(json.dumps(prof.as_dict()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]), sys.argv[2], [int(c) for c in sys.argv[3:]] + [None]))
