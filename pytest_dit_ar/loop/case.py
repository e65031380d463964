"""One case by hand (`dit-ar case ID`): the seed its requests carry in this session, and its image.

The workers never see a corpus seed as written: each is keyed by the session's secret (`quality_suite.corpora.
keyed_seed`, as every corpus run derives it), so a candidate that knows the published corpus cannot recognise a
quality run, and each session has seeds of its own. A case id's number (`s4102`) is the corpus seed, not the one
generated; this says which one was, so that a user can call the pipeline with it. The image is the current best's,
generated now in a harness worker (sandboxed, as in an experiment), or with `baseline` the original baseline's, as
stored; a JSON file beside the PNG records the prompt and both seeds. A corpus case is named by its id, a replica of
one (the task-score tests' further cases) by `<id>-r<k>`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dit_ar_contract.errors import Refused
from quality_suite.artifacts import load_cases, to_png
from quality_suite.corpora import Case, keyed_seed, load_corpus, replica_seed

from ..state import gitops
from ..state.baseline import cases_dir
from ..state.best import require_best
from ..state.files import write_json_atomic
from ..state.paths import new_run_id
from ..state.runs import RunPaths
from ..state.session import Session, open_session
from .guards import gpu_locks
from .quality.generation import generate_corpus
from .workers.launch import launcher_for

REPLICA = re.compile(r"(?P<case>.+)-r(?P<k>[1-9][0-9]*)")


@dataclass(frozen=True)
class CaseImage:
    """What `dit-ar case` wrote: the case, the seed this session's workers use for it, the PNG and whose it is."""

    case: Case
    seed: int
    png: Path
    source: str


def find_case(cases: list[Case], case_id: str) -> Case:
    """The corpus case `case_id`, or the replica `<id>-r<k>` of one; refused with a few known ids otherwise."""
    by_id = {c.id: c for c in cases}
    if case_id in by_id:
        return by_id[case_id]
    match = REPLICA.fullmatch(case_id)
    if match and match.group("case") in by_id:
        base = by_id[match.group("case")]
        return Case(case_id, base.prompt, replica_seed(base.seed, int(match.group("k"))), base.label)
    shown = ", ".join(c.id for c in cases[:5]) + (", ..." if len(cases) > 5 else "")
    raise Refused(f"no case {case_id!r} in the lane's corpus (its ids: {shown}; a replica is <id>-r<k>)",
                  way_out="`pytest -m quality --collect-only -q` lists the corpus cases")


def session_seed(session: Session, case: Case) -> int:
    """The seed the session's workers get for `case` (its corpus seed keyed by the session's secret)."""
    return keyed_seed(case.seed, session.started.seed_key)


def write_case(config_path: Path, case_id: str, baseline: bool = False, out_dir: Path | None = None,
               sandboxed: bool = True) -> CaseImage:
    """Write the case's PNG (the best's, generated now; or the baseline's stored one) and say its seed."""
    session = open_session(config_path)
    case = find_case(load_corpus(session.root / session.lane.corpus), case_id)
    folder = out_dir or session.paths.dir / "cases"
    folder.mkdir(parents=True, exist_ok=True)
    made = _baseline_image(session, case, folder) if baseline else _best_image(session, case, folder, sandboxed)
    write_json_atomic(made.png.with_suffix(".json"), {
        "case": case.id, "prompt": case.prompt, "label": case.label, "corpus_seed": case.seed, "seed": made.seed,
        "image": made.png.name, "source": made.source})
    return made


def _baseline_image(session: Session, case: Case, folder: Path) -> CaseImage:
    if REPLICA.fullmatch(case.id) and case.id not in session.verified_baseline().cases:
        raise Refused(f"the baseline stores the images of the corpus cases, not of the replica {case.id}",
                      way_out=f"`dit-ar case {case.id}` generates it with the best")
    summary = session.verified_baseline()
    images, _ = load_cases(cases_dir(session.baseline_dir), [case])
    png = folder / f"{case.id}-baseline-{summary.commit[:10]}.png"
    to_png(images[case.id]).save(png)
    return CaseImage(case, session_seed(session, case), png, f"the baseline {summary.commit[:10]}, as stored")


def _best_image(session: Session, case: Case, folder: Path, sandboxed: bool) -> CaseImage:
    """Generate the case with the current best in a harness worker, as a corpus run does (a full batch, the
    other places filled with fresh requests), one experiment or case at a time per repository and GPU."""
    best = require_best(session.best(), session.lane_id)
    lock = gpu_locks.hold_session_lock(session.paths, "wait for it to finish (a case is generated between "
                                                      "experiments, never during one)")
    held = gpu_locks.acquire_lane(session.target)
    try:
        repo = gitops.open_repo(session.root)
        gitops.sync_worktree(repo, session.paths.best_worktree, best.commit)
        launcher, root, lane = launcher_for(session, sandboxed), session.paths.best_worktree, session.lane
        log = RunPaths(session.paths.run(new_run_id("case"))).worker_log("case")
        log.parent.mkdir(parents=True, exist_ok=True)
        with launcher.worker("best", root, log) as worker:
            worker.request("build", spec=lane.workload(launcher.model_root(root), session.root))
            outputs = generate_corpus(worker, [case], lane.batch, session.started.seed_key, lane.resolution)
    finally:
        gpu_locks.release(held)
        lock.release()
    png = folder / f"{case.id}-best-{best.commit[:10]}.png"
    to_png(outputs.images[case.id]).save(png)
    return CaseImage(case, session_seed(session, case), png, f"the best {best.commit[:10]}, generated now")
