"""What seeding a new tree's compile cache from the best's saves: a compiled best, then a no-op against it, with
the lane's `performance.reuse` off (the no-op's tree starts with an empty cache: a cold compile) and on (its
folder starts as the harness's copy of the best's), side by side.

Two project copies of this tree, each with the embedded test model's denoiser wrapped in `torch.compile` in its
first commit (so the baseline's worker fills the best's cache folder), initialised and baselined; then the same
no-op (a comment) in each. Prints, per arm, the no-op tree's first-worker start (build + first generate) from the
harness's cache record, whether it was seeded, the phase record and the verdict; writes the raw records as JSON.

    python -m lab.tools.seeded_cache --out /tmp/seeded-cache.json [--fast] [--lane embedded-cpu]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from lab.tools.fast_keeps import ARMS, judged, project
from pytest_dit_ar.loop.speed.patching import wrap_build
from tests.helpers.loop import commit_change

COMPILED = """\
import torch
pipe = _build_compiled(spec)
pipe.transformer = torch.compile(pipe.transformer)
return pipe"""


def tree_records(repo: Path) -> dict[str, dict]:
    folder = repo / ".autoresearch" / "compile-cache"
    return {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--lane", default="embedded-cpu")
    ap.add_argument("--fast", action="store_true", help="the end-to-end tests' short protocol instead of the lane's")
    args = ap.parse_args()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="seeded-cache-") as tmp:
        for arm, reuse in ARMS.items():
            repo = project(Path(tmp) / arm.replace(" ", "-"), args.lane, reuse, args.fast,
                           wrap_build("compiled", COMPILED))
            before = tree_records(repo)
            commit_change(repo, "model_under_test/__init__.py", "\n# a comment: nothing changes\n", "a no-op")
            result = judged(repo, "a no-op")
            new = {d: r for d, r in tree_records(repo).items() if d not in before}
            result["best_tree"] = next(iter(before.values()), None)
            result["noop_tree"] = next(iter(new.values()), None)
            results[arm] = result
    args.out.write_text(json.dumps(results, indent=1))
    for arm, r in results.items():
        best, noop = r["best_tree"] or {}, r["noop_tree"] or {}
        print(f"{arm}: best tree first start {best.get('cold_start_s')} s; no-op tree first start "
              f"{noop.get('cold_start_s')} s, seeded from {noop.get('seeded_from')}; {r['status']}; "
              f"phases {r['phases']}")


if __name__ == "__main__":
    main()
