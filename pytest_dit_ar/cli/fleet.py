"""`dit-ar fleet doctor|up|status|adopt|down`: a fleet of research sessions judged slot by slot on Ray.

A slot is whole GPUs of one node (a Ray placement group of one bundle); each session is a worktree and branch
bound to one slot at `init`, and every judging of it (baseline, experiment, calibration, re-validation) runs in
that slot, both timed sides in one process (fleet/). Ray is needed only here and in fleet sessions:
`pip install '.[ray]'`. `up` and `adopt` are in fleet_up.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dit_ar_contract.config import load_config
from dit_ar_contract.errors import Refused


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from . import fleet_up

    p = sub.add_parser("fleet", help="a fleet of sessions judged slot by slot on a Ray cluster (doctor, up, status, "
                       "adopt, down)", description=__doc__.splitlines()[0] if __doc__ else None)
    verbs = p.add_subparsers(dest="fleet_verb", required=True, metavar="FLEET_VERB")
    d = verbs.add_parser("doctor", help="each node: sandbox, GPUs, harness version, weights' hashes, token auth")
    d.add_argument("--address", default="auto", help="the Ray cluster (default: the one running here)")
    d.set_defaults(func=doctor)
    fleet_up.add_up(verbs)
    s = verbs.add_parser("status", help="sessions, slots busy or idle, GPU-seconds per experiment and per keep, the "
                         "fleet's best per lane, and the nearest earlier descriptions of an idea")
    s.add_argument("--tag-prefix", help="the fleet (default: the repository's only one)")
    s.add_argument("--idea", help="list the experiments whose descriptions are nearest to this text")
    s.set_defaults(func=status)
    fleet_up.add_adopt(verbs)
    w = verbs.add_parser("down", help="remove the fleet's slots and judges; worktrees, branches and state stay")
    w.add_argument("--tag-prefix", help="the fleet (default: the repository's only one)")
    w.set_defaults(func=down)
    return p


def _repo(config_path: Path):  # noqa: ANN202 - a GitPython Repo
    from ..state import gitops

    return gitops.open_repo(load_config(config_path).root)


def _executor(address: str):  # noqa: ANN202 - a RayExecutor, imported on use
    from ..fleet.route import ray_executor

    return ray_executor(address)


def doctor(args: argparse.Namespace) -> int:
    from ..fleet import doctor as checks

    config = load_config(args.config)
    outside = tuple(sorted({w for lane in config.lanes.values()
                            for w in [lane.weights_path(config.root)] if w and not _inside(Path(w), config.root)}))
    executor = _executor(args.address)
    control = checks.node_report(outside)
    reports = executor.on_every_node(checks.node_report, outside)
    print(f"control node {control.host}: harness {control.version} ({control.harness[:12]}), Ray {_ray_version()}")
    failed = 0
    for report in reports:
        bad, notes = checks.problems(report, control), checks.warnings(report)
        failed += bool(bad)
        gpus = "; ".join(report.gpus) or "no GPU"
        print(f"{'FAIL' if bad else 'ok  '} {report.host}: {gpus}; sandbox {'ok' if not report.sandbox else 'NO'}; "
              f"cgroups: {report.cgroups}; auth {report.auth or 'off'}")
        print(f"     {checks.memory_line(report)}")
        for line in bad:
            print(f"     - {line}")
        for line in notes:
            print(f"     ! {line}")
    print(f"{len(reports)} node(s), {failed} cannot judge" + ("" if failed else "; all can judge"))
    return 1 if failed else 0


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _ray_version() -> str:
    from ..fleet.ray_executor import version

    return version()


def status(args: argparse.Namespace) -> int:
    from ..fleet import registry, usage

    repo = _repo(args.config)
    record = registry.one(repo, args.tag_prefix)
    usages = [usage.session_usage(s) for s in record.sessions]
    print(f"fleet {record.name}: lane {record.lane}, {len(record.slots)} slot(s) of {record.gpus} GPU(s), "
          f"{len(record.sessions)} session(s), cluster {record.address}")
    for slot, busy in usage.busy_slots(record, usages).items():
        print(f"  slot {slot}: {busy or 'idle'}")
    print(f"  {'session':<14} {'slot':<18} {'exp':>4} {'keep':>4} {'GPU-s/exp':>9} {'GPU-s/keep':>10} "
          f"{'slot-s':>8} {'speed-up':>8}  now")
    for u in usages:
        print(f"  {u.tag:<14} {u.slot:<18} {u.experiments:>4} {u.keeps:>4} {_num(u.per_experiment):>9} "
              f"{_num(u.per_keep):>10} {u.slot_seconds:>8.0f} {_num(u.speedup, 'x'):>8}  {u.busy or 'idle'}")
    for lane, best in usage.fleet_best(usages).items():
        print(f"fleet's best on {lane}: {best.tag} at {best.best[:10]}, {best.speedup:.3f}x its own baseline "
              "(each session is timed in its own slot; ratios compare, latencies do not)")
    if args.idea:
        print(f"nearest earlier descriptions of {args.idea!r}:")
        for n in usage.nearest(args.idea, list(record.sessions)):
            print(f"  {n.score:5.1f}  {n.tag:<14} {n.row.status.word:<20} {n.row.description[:70]}  ({n.row.run_id})")
    return 0


def _num(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.3g}{unit}"


def down(args: argparse.Namespace) -> int:
    from ..fleet import registry, usage

    repo = _repo(args.config)
    record = registry.one(repo, args.tag_prefix)
    busy = [u for u in (usage.session_usage(s) for s in record.sessions) if u.busy]
    if busy:
        raise Refused("judgings are in flight (" + "; ".join(f"{u.tag}: {u.busy}" for u in busy) + "): let them end "
                      "(each session's `dit-ar status` records one a killed driver left), then `fleet down` again")
    executor = _executor(record.address)
    for name in executor.judges(f"judge:{record.name}:"):
        executor.kill_judge(name)
    removed = [slot for slot in record.slots if executor.remove_slot(slot)]
    registry.remove(repo, record.name)
    print(f"fleet {record.name}: {len(removed)} slot(s) removed; the worktrees, branches and sessions stay:")
    for s in record.sessions:
        print(f"  {s.worktree}  (branch autoresearch/{s.tag}; `git worktree remove {s.worktree}` when done)")
    return 0
