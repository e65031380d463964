"""`dit-ar profile`: stage attribution, FLOPs and roofline of the working tree's pipeline
(docs/design/speed-verdict.md).

The default mode profiles in a worker process (as the harness times it) and writes
`.autoresearch/runs/profile-<time>/{profile.json,trace.json}`. `--once` runs one steady-state generate
in this process between cudaProfilerStart/Stop with NVTX ranges, for `nsys`/`ncu` to wrap.
Profiling changes no git or session state; it works before `dit-ar init` too.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the verb's own imports are lazy: `dit-ar --version` and `search` must not pay for them
    from ..state.session import Session


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("profile", help="stage times, FLOPs and roofline of the working tree's pipeline",
                       description="Stage attribution (text_encode / denoise per step / decode), top kernels, "
                                   "FLOPs and percent of the device roofline of the working tree's pipeline.")
    p.add_argument("--lane", help="lane to profile (default: the session's lane, else the config's default)")
    p.add_argument("--batch", type=int, help="requests per generate (default: the lane's batch)")
    p.add_argument("--repeats", type=int, default=3, help="plain timed generates before the profiled one")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--once", action="store_true",
                   help="run one steady-state generate in this process (for nsys/ncu; see the printed commands)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up generates before the one --once profiles")
    p.set_defaults(func=run)
    return p


def _commit(root: Path) -> str:
    from ..state import gitops

    try:
        repo = gitops.open_repo(root)
        return gitops.head_sha(repo)[:10] + ("+dirty" if gitops.dirty_entries(repo) else "")
    except Exception:  # not a git repo, no commits: profiling still works
        return "unknown"


def _requests(session: Session, batch: int) -> list[list[Any]]:
    """The first `batch` corpus requests (repeated when the corpus is shorter)."""
    from quality_suite.corpora import load_corpus

    cases = load_corpus(session.root / session.lane.corpus)
    return [list(cases[i % len(cases)].request) for i in range(batch)]


def profile(session: Session, batch: int, repeats: int, run_dir: Path) -> dict[str, Any]:
    """Profile the working tree in a worker and return the full record (also written to profile.json)."""
    from perf_suite import profiling

    run_dir.mkdir(parents=True, exist_ok=True)
    # unsandboxed: profiling decides nothing, and its trace is written outside a scratch folder
    from ..loop.workers.launch import launcher_for  # torch and the suites: only when profiling
    from ..state.files import write_record
    from ..state.paths import now
    from ..state.runs import RunPaths

    run = RunPaths(run_dir)
    trace = run.trace

    launcher = launcher_for(session, sandboxed=False)
    with launcher.worker("profile", session.root, run.worker_log("profile")) as worker:
        build = worker.request("build", spec=session.lane.workload(session.root))
        raw = worker.request("profile", requests=_requests(session, batch), trace=str(trace), repeats=repeats)
        peak = profiling.device_peak(worker)
        identity = dict(worker.identity)
    summary = profiling.summarize(raw, peak, session.lane.steps, batch)
    info = {"lane": session.lane.name, "lane_id": session.lane_id, "device": identity.get("name"), "identity": identity,
            "commit": _commit(session.root), "created": now(),
            "build_s": build["build_s"], "summary": summary, "trace": str(trace), "json": str(run.profile),
            "commands": profiling.deeper_commands(session.config.path, session.lane.name, run_dir, summary["top_ops"])}
    write_record(run.profile, info)
    return info


def once(session: Session, batch: int, warmup: int) -> float:
    """Build in this process and time one steady-state generate inside the profiler-capture range."""
    from perf_suite import profiling

    from ..worker.server import import_model

    os.environ.update(session.target.env)
    import torch

    torch.set_num_threads(session.lane.performance.threads)
    pipe = import_model(session.root).build_pipeline(session.lane.workload(session.root))
    requests = [(str(p), int(s)) for p, s in _requests(session, batch)]
    return profiling.run_once(pipe, requests, session.lane.is_cuda, warmup)


def run(args: argparse.Namespace) -> int:
    from ..state.runs import profile_run_id
    from ..state.session import open_session

    session = open_session(args.config, args.lane, need_session=False)
    batch = args.batch or session.lane.batch
    if args.once:
        seconds = once(session, batch, args.warmup)
        print(f"one generate of {batch} on lane {session.lane_id}: {seconds * 1e3:.1f} ms "
              f"(after {args.warmup} warm-ups)")
        return 0
    run_dir = session.paths.run(profile_run_id())
    info = profile(session, batch, args.repeats, run_dir)
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        from perf_suite.profiling import format_table

        print("\n".join(format_table(info)))
    return 0
