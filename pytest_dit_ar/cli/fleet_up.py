"""`dit-ar fleet up` (slots, one worktree, branch and session per slot share, each baseline in its slot) and
`dit-ar fleet adopt --from TAG` (a commit kept in another session, judged again here)."""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from dit_ar_contract.config import load_config
from dit_ar_contract.errors import Refused

AGENT = "$AGENT"  # the agent command the user runs in each worktree (DIT_AR_AGENT, when set, is printed instead)


def add_up(verbs: argparse._SubParsersAction) -> None:
    u = verbs.add_parser("up", help="slots, one worktree and session per slot share, each baseline in its slot; "
                         "prints one agent command per worktree")
    u.add_argument("--lane", required=True, help="the lane every session runs")
    u.add_argument("--sessions", type=int, required=True, help="how many sessions (worktrees) to start")
    u.add_argument("--tag-prefix", required=True, help="names the fleet: sessions P-00.., slots P:slot-0..")
    u.add_argument("--address", default="auto", help="the Ray cluster (default: the one running here)")
    u.add_argument("--sessions-per-slot", type=int, default=1,
                   help="sessions sharing one slot (their judgings queue on it; the GPU judges one while the other "
                        "session's agent thinks; default 1)")
    u.set_defaults(func=up)


def add_adopt(verbs: argparse._SubParsersAction) -> None:
    a = verbs.add_parser("adopt", help="cherry-pick a commit kept in another session onto this session's best and "
                         "judge it again here (a conflict aborts and changes nothing)")
    a.add_argument("--from", dest="source", required=True, metavar="TAG", help="the session that kept it")
    a.add_argument("--commit", default="", help="which of its keeps (default: its latest)")
    a.set_defaults(func=adopt)


def up(args: argparse.Namespace) -> int:
    from ..fleet import registry
    from ..fleet.executor import SLOT_CPUS
    from ..fleet.registry import FleetRecord, FleetSession
    from ..fleet.route import ray_executor
    from ..state import gitops
    from ..state.paths import now

    config = load_config(args.config)
    lane = config.lane(args.lane)
    if args.sessions < 1 or args.sessions_per_slot < 1:
        raise Refused("--sessions and --sessions-per-slot must be at least 1")
    if not gitops.valid_tag(f"{args.tag_prefix}-00") or ":" in args.tag_prefix:
        raise Refused(f"--tag-prefix {args.tag_prefix!r}: use letters, digits, '.', '_' or '-'")
    repo = gitops.open_repo(config.root)
    gitops.require_clean(repo)
    executor = ray_executor(args.address)
    gpus = lane.gpus if lane.is_cuda else 0
    slots = tuple(f"{args.tag_prefix}:slot-{i}" for i in range(math.ceil(args.sessions / args.sessions_per_slot)))
    for slot in slots:
        executor.create_slot(slot, gpus, SLOT_CPUS)
    print(f"{len(slots)} slot(s) of {gpus} GPU(s) on lane {lane.name}: {', '.join(slots)}")
    _memory(executor, lane.guardrails.host_memory_mb)
    origin = _origin(config.root, lane.name) or gitops.head_sha(repo)
    sessions = []
    for i in range(args.sessions):
        tag = f"{args.tag_prefix}-{i:02d}"
        tree = config.root.parent / f"{config.root.name}-{tag}"
        if not tree.exists():
            repo.git.worktree("add", "--detach", str(tree), origin)
        sessions.append(FleetSession(tag, str(tree), slots[i // args.sessions_per_slot]))
    record = FleetRecord(args.tag_prefix, lane.name, args.address, gpus, slots, tuple(sessions), now())
    registry.write(repo, record)
    relative = config.path.resolve().relative_to(config.root.resolve())
    for s in sessions:
        _dit_ar(Path(s.worktree), relative, "init", "--tag", s.tag, "--lane", lane.name, "--executor", "ray",
                "--address", args.address, "--slot", s.slot)
    failed = _baselines(sessions, relative)
    agent = os.environ.get("DIT_AR_AGENT", AGENT)
    print("one agent per worktree (each follows program.md; its `dit-ar experiment` is judged in its slot):")
    for s in sessions:
        print(f"  cd {s.worktree} && {agent}")
    return 1 if failed else 0


def _memory(executor, configured: float | None) -> None:  # noqa: ANN001 - a RayExecutor
    """Each node's memory line (what holds a worker's limit, Ray's memory monitor) and its warnings: Ray reads its
    monitor's settings at `ray start`, so `fleet up` checks them rather than sets them (docs/guide/fleet.md)."""
    from ..fleet import doctor as checks

    for report in executor.on_every_node(checks.node_report, ()):
        limit = f"{configured:.0f} MiB (the lane's guardrails.host_memory_mb)" if configured else \
            "the slot's share of the node (worker/host_limit.py)"
        print(f"  node {report.host}: {checks.memory_line(report)}; each worker's limit: {limit}")
        for line in checks.memory_warnings(report):
            print(f"    ! {line}")


def _origin(root: Path, lane: str) -> str | None:
    """The lane's recorded baseline commit in the main worktree's ledger (the sessions start there)."""
    from ..loop.init_session import recorded_origins
    from ..state.paths import StatePaths

    found = recorded_origins(StatePaths(root), lane)
    return found[0] if found else None


def _command(tree: Path, config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "pytest_dit_ar.cli", "--config", str(tree / config), *args]


def _dit_ar(tree: Path, config: Path, *args: str) -> None:
    proc = subprocess.run(_command(tree, config, *args), cwd=tree, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith(("slot ", "session ")):  # init's slot and session lines
            print(f"  {tree.name}: {line}")
    if proc.returncode != 0:
        raise Refused(f"`dit-ar {' '.join(args)}` in {tree} exited {proc.returncode}: "
                      f"{(proc.stderr or proc.stdout).strip()[-1500:]}")


def _baselines(sessions: list, config: Path) -> int:  # noqa: ANN001 - FleetSession items
    """Every session's baseline in its slot, at once (sessions sharing a slot queue on it); their output goes to
    each worktree's .autoresearch/fleet-baseline.log. Returns how many failed."""
    started, procs = time.time(), []
    for s in sessions:
        tree = Path(s.worktree)
        log = tree / ".autoresearch" / "fleet-baseline.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as fh:
            procs.append((s, log, subprocess.Popen(_command(tree, config, "baseline", "--quiet"), cwd=tree,
                                                   stdout=fh, stderr=subprocess.STDOUT)))
    failed = 0
    for s, log, proc in procs:
        code = proc.wait()
        failed += code != 0
        last = (log.read_text(errors="replace").strip().splitlines() or [""])[-1]
        print(f"  baseline {s.tag} in {s.slot}: {'ok' if code == 0 else f'exit {code}'} — {last[:160]}")
    failures = f"; {failed} failed (see their logs)" if failed else ""
    print(f"baselines done in {time.time() - started:.0f} s{failures}")
    return failed


def adopt(args: argparse.Namespace) -> int:
    """Cherry-pick the source session's keep onto this session's best, then judge it here like any candidate."""
    from ..fleet.adopt import adopted

    source, classification, description = adopted(args.config, args.source, args.commit)
    from ..fleet.route import driver

    fleet = driver(args.config)
    if fleet is not None:
        return fleet.experiment(classification, description, adopted_from=args.source)
    return subprocess.call([sys.executable, "-m", "pytest_dit_ar.cli", "--config", str(args.config), "experiment",
                            "--classification", classification, "--description", description])
