"""`dit-ar calibrate`: measure this machine's noise on the session's lane (A/A pairs of the best against
itself in fresh pairs, loop/speed/aa_pairs.py, on the experiment's launcher and pair code; optionally
injected speedups), store it as the statistics' prior (.autoresearch/noise.json, only after a complete run)
and print the power it implies, with a figure. With --quality: the task-score tests' pass rates for known
degradations and harmless changes the harness applies to a pool of the lane's outputs
(loop/quality/calibration.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dit_ar_contract.errors import Refused

MIN_PAIRS = 3


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("calibrate", help="measure this machine's timing noise on the lane; store it as the verdict's "
                       "prior and print the wins it can detect",
                       description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--pairs", type=int, default=None, help=f"A/A worker pairs (at least {MIN_PAIRS}; default the "
                   "lane's performance.calibration_pairs, 8)")
    p.add_argument("--rounds", type=int, default=None, help="paired rounds per pair (default the lane's "
                   "performance.calibration_rounds, else its rounds; longer pairs give a smaller bound B)")
    p.add_argument("--speedups", default="", help="comma-separated true speedups in percent to inject (2 pairs each)")
    p.add_argument("--steps", type=int, default=None, help="override the lane's sampling steps")
    p.add_argument("--budget-s", type=float, default=None, help="stop collecting after this many seconds; an "
                   "unfinished calibration leaves the previous profile (default 900, more when the pairs at the "
                   "best's latency need it)")
    p.add_argument("--figure", type=Path, default=None, help="where to write the figure (default "
                   ".autoresearch/calibration-<lane>.png)")
    p.add_argument("--unsandboxed", action="store_true", help="workers without the bubblewrap sandbox")
    p.add_argument("--judge-only", action="store_true", help=argparse.SUPPRESS)  # a fleet's judge (fleet/)
    p.add_argument("--run-id", default="", help=argparse.SUPPRESS)
    q = p.add_argument_group("quality", "the task-score tests' error rates instead of the timing noise")
    q.add_argument("--quality", action="store_true", help="measure how often the quality tests pass known "
                   "degradations (0.5, 1, 2, 5 x the margin or the resolution) and harmless changes")
    q.add_argument("--blocks", type=int, default=20, help="pool size in corpus-sized blocks, fresh seeds (default "
                   "20; a session draws the case budget's worth)")
    q.add_argument("--sessions", type=int, default=200, help="simulated sessions per change (default 200)")
    q.add_argument("--sizes", default="0.5,1,2,5", help="degradations as multiples of the margin (default "
                   "0.5,1,2,5)")
    p.set_defaults(func=run)
    return p


def _in_slot(args: argparse.Namespace) -> int | None:
    """A fleet session calibrates in its slot, where its experiments are timed; None for a local session."""
    if args.judge_only:
        return None
    from ..fleet.route import driver

    fleet = driver(args.config)
    if fleet is None:
        return None
    argv = ["calibrate", "--pairs", str(args.pairs), "--speedups", args.speedups, "--budget-s", str(args.budget_s)]
    argv += ["--rounds", str(args.rounds)] if args.rounds else []
    argv += ["--steps", str(args.steps)] if args.steps else []
    argv += ["--unsandboxed"] if args.unsandboxed else []
    return fleet.verb("calibration", tuple(argv))


def _speedups(text: str) -> list[float]:
    try:
        values = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise Refused(f"--speedups {text!r}: expected comma-separated percentages such as 5,10") from None
    if any(not 0 < v < 90 for v in values):
        raise Refused(f"--speedups {text!r}: each speedup must be between 0 and 90 percent")
    return values


def run(args: argparse.Namespace) -> int:
    if args.quality:
        from ..loop.quality.calibration import run_quality_calibration, sizes_of

        if args.sessions < 20:
            raise Refused(f"--sessions {args.sessions}: a pass rate needs at least 20 simulated sessions")
        return run_quality_calibration(args.config, args.blocks, args.sessions, sizes_of(args.sizes),
                                       sandboxed=not args.unsandboxed)
    from perf_suite.sequential import Design

    from ..loop.guards.gpu_locks import acquire_lane, release
    from ..loop.speed.aa_pairs import StudyPlan
    from ..loop.speed.calibration import Collected, budget_s, collect, describe, figure, one_pair_s, profile_of
    from ..loop.speed.pairs import timed_cores
    from ..state import gitops
    from ..state.files import write_json_atomic
    from ..state.noise import noise_path, store_profile
    from ..state.session import open_session

    if args.pairs is not None and args.pairs < MIN_PAIRS:
        raise Refused(f"--pairs {args.pairs}: a calibration needs at least {MIN_PAIRS} A/A pairs")
    speedups = _speedups(args.speedups)
    routed = _in_slot(args)
    if routed is not None:
        return routed
    session = open_session(args.config)  # refuses without a session or when the lane cannot run here
    lane, protocol = session.lane, session.lane.performance
    pairs = args.pairs or protocol.calibration_pairs
    rounds = args.rounds or protocol.calibration_rounds or protocol.rounds
    if rounds < 4:
        raise Refused(f"--rounds {rounds}: a pair needs at least 4 paired rounds")
    best = session.best()
    latency = best.measurements.median_ms if best else None
    need = one_pair_s(protocol, latency, lane.is_cuda)
    budget = args.budget_s if args.budget_s is not None else budget_s(protocol, latency, lane.is_cuda, pairs, rounds)
    if budget < need:
        raise Refused(f"--budget-s {budget:g} is too little time for one pair on lane {lane.name} (about "
                      f"{need:.0f} s here); give at least {MIN_PAIRS * need:.0f} s")
    tree = session.paths.best_worktree if session.paths.best_worktree.is_dir() else session.root
    commit = gitops.head_sha(gitops.open_repo(tree))
    out = session.paths.dir / f"calibration-{session.lane_id}.json"
    plan = StudyPlan.calibration(args.config, lane.name, tree, pairs, rounds, speedups, args.steps,
                                 budget, out, sandboxed=not args.unsandboxed)
    held = acquire_lane(session.target)
    try:
        collected: Collected = collect(plan)
    finally:
        release(held)
    if not collected.complete:
        done = len(collected.null)
        print(f"dit-ar calibrate: incomplete: {done} of {pairs} A/A pairs within --budget-s {budget:g}; "
              f"the previous profile stays in {noise_path(session.paths)} (data in {out})")
        return 1
    profile = profile_of(collected, session.lane_id, commit, protocol, lane.primary_metric)
    if args.judge_only:  # the session's own process stores it (fleet/apply.py)
        write_json_atomic(session.paths.dir / f"calibration-{session.lane_id}.profile.json", profile.as_dict())
    else:
        store_profile(session.paths, profile)
    design = Design.from_protocol(protocol, lane.primary_metric)
    one_core = not lane.is_cuda or len(timed_cores(protocol, lane.is_cuda) or ()) == 1
    for line in describe(profile, design, one_core, protocol.bound_confidence):
        print(line)
    path = figure(profile, collected.null, design,
                  args.figure or session.paths.dir / f"calibration-{session.lane_id}.png")
    if args.judge_only:  # in a fleet's slot: the paths are the session's, where its own process puts them
        print(f"profile measured in the slot; the session's own process stores it in "
              f"{noise_path(session.paths).relative_to(session.root)}; figure {path.relative_to(session.root)}")
        return 0
    print(f"profile stored in {noise_path(session.paths)} (the verdict's prior for lane {session.lane_id}); "
          f"figure {path}")
    return 0
