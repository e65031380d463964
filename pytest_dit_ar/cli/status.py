"""`dit-ar status` (read-only) and `dit-ar recover` (puts the branch and the baseline back)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import git

from dit_ar_contract.config import repo_root_for
from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status

from ..report.summary import latest_revalidation, session_rows
from ..state import backup, gitops, integrity, ledger
from ..state.baseline import manifest_problems
from ..state.files import read_json, read_json_object
from ..state.paths import STATE_DIR
from ..state.session import Session, open_session


def _head_relation(repo: git.Repo, head: str, best: str | None) -> tuple[str, str | None]:
    """How HEAD relates to the recorded best, and the command that fixes it when it is wrong."""
    if not best:
        return "no best recorded yet (run `dit-ar baseline`)", None
    if head == best:
        return "HEAD is the best", None
    if repo.is_ancestor(head, best):
        return (f"HEAD {head[:10]} is BEHIND the best {best[:10]} (an extra reset?)",
                "dit-ar recover   # or: git reset --hard " + best)
    if repo.is_ancestor(best, head):
        n = int(repo.git.rev_list("--count", f"{best}..{head}"))
        if n == 1:
            return "one candidate commit on top of the best: run `dit-ar experiment`", None
        return f"{n} commits on top of the best: squash them into one before `dit-ar experiment`", None
    return f"HEAD {head[:10]} has diverged from the best {best[:10]}", "dit-ar recover"


def _failures(session: Session, rows: list[ledger.LedgerRow]) -> list[dict[str, Any]]:
    out = []
    for row in [r for r in rows if r.status.is_failure][-5:]:
        crash = session.root / row.run_dir / "crash.txt"
        detail = crash.read_text(errors="replace").strip().splitlines()[0] if crash.is_file() else \
            (row.reason or row.quality_summary)
        out.append({"run_id": row.run_id, "status": row.status.word, "description": row.description,
                    "detail": detail[:300], "run_dir": row.run_dir})
    return out


def collect(session: Session, rows: int) -> dict[str, Any]:
    repo = gitops.open_repo(session.root)
    head = gitops.head_sha(repo)
    best = session.best()
    record = session.record
    ref = gitops.read_ref(repo, gitops.best_ref(record.tag, session.lane_id)) if record else None
    best_sha = ref or (best.commit if best else None)
    relation, fix = _head_relation(repo, head, best_sha)
    all_rows = [r for r in ledger.read(session.paths.ledger) if r.lane == session.lane_id]
    baseline = read_json_object(session.baseline_dir / "baseline.json")
    timing = baseline.get("timing") or {}
    problems = manifest_problems(session.baseline_dir)
    return {
        "tag": record.tag if record else None, "branch": gitops.current_branch(repo), "lane": session.lane.name,
        "lane_id": session.lane_id, "device": session.target.identity.as_dict(), "head": head,
        "best": {"commit": best.commit if best else None, "ref": ref,
                 "median_ms": best.measurements.median_ms if best else None,
                 "p95_ms": best.measurements.p95_ms if best else None},
        "head_relation": relation, "fix": fix,
        "baseline": {"present": problems is not None, "intact": problems == [], "commit": baseline.get("commit"),
                     "task_metrics": baseline.get("task_metrics"), "envelope": baseline.get("envelope"),
                     "median_ms": timing.get("median_ms"), "noise_floor_pct": timing.get("noise_floor_pct")},
        "counts": {s.word: sum(r.status is s for r in all_rows) for s in Status},
        "recent": [r.as_dict() for r in all_rows[-rows:]], "recent_failures": _failures(session, all_rows),
        "revalidation": _revalidation(session, all_rows),
    }


def _revalidation(session: Session, rows: list[ledger.LedgerRow]) -> dict[str, Any] | None:
    """The lane's latest re-validation in this session: its line and, when the chain measured again disagrees
    with the product of its steps, the warning."""
    data = latest_revalidation(session.root, session_rows(rows, session.lane_id))
    return {"run_id": data.get("run_id"), "headline": data.get("headline"), "agree": data.get("agree"),
            "warning": data.get("warning")} if data else None


def _num(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _print(info: dict[str, Any]) -> None:
    print(f"session {info['tag']}  branch {info['branch']}  lane {info['lane_id']} on {info['device'].get('name')}")
    best = info["best"]
    print(f"best {str(best['commit'])[:10]}  median {_num(best['median_ms'])} ms, p95 {_num(best['p95_ms'])} ms")
    print(f"HEAD {info['head'][:10]}: {info['head_relation']}")
    if info["fix"]:
        print(f"  fix: {info['fix']}")
    b = info["baseline"]
    state = "intact" if b["intact"] else ("DAMAGED — run `dit-ar recover`" if b["present"] else "missing")
    metrics = ", ".join(f"{k} {_num(v)}" for k, v in (b["task_metrics"] or {}).items()) or "none"
    print(f"baseline {state}; task metrics {metrics}; median {_num(b['median_ms'])} ms; "
          f"A/A noise {_num(b['noise_floor_pct'], 3)}%")
    print("counts: " + ", ".join(f"{k}={v}" for k, v in info["counts"].items()))
    reval = info.get("revalidation")
    print(f"re-validation: {reval['headline']}" if reval else "re-validation: none yet (`dit-ar revalidate`)")
    if reval and reval.get("warning"):
        print(reval["warning"])
    if info["recent"]:
        print("recent (candidate: its median batch latency or images/s, the ledger's `candidate`; paired %: the "
              "verdict's paired estimate, the ledger's `improvement_pct`):")
        print(f"  {'time':<19}  {'status':<20} {'commit':<8}  {'candidate':>10}  {'paired %':>8}  description")
        for r in info["recent"]:
            print(f"  {r['timestamp'][:19]}  {r['status']:<20} {r['commit'][:8]}  {_num(r['candidate']):>10}  "
                  f"{_num(r['improvement_pct'], 3):>8}  {r['description'][:60]}")
    if info["recent_failures"]:
        print("recent failures:")
        for f in info["recent_failures"]:
            print(f"  {f['run_id']} {f['status']}: {f['detail']}  ({f['run_dir']})")


def session_worktrees(config_path: Path) -> list[Path]:
    """The repository's git worktrees that may hold a research session (one session per worktree, e.g. one per
    GPU), the harness's own candidate and best worktrees left out."""
    repo = gitops.open_repo(repo_root_for(config_path))
    return [p for p in gitops.worktrees(repo) if STATE_DIR not in p.parts]


def everywhere(config_path: Path, rows: int) -> list[dict[str, Any]]:
    """`collect` for the session of every worktree (one command for sessions side by side)."""
    relative = Path(config_path).resolve().relative_to(repo_root_for(config_path))
    out = []
    for tree in session_worktrees(config_path):
        try:
            out.append({"worktree": str(tree), **collect(open_session(tree / relative), rows)})
        except Refused as exc:  # no session there yet, or its lane cannot run on this machine
            out.append({"worktree": str(tree), "problem": str(exc)})
    return out


def _print_all(infos: list[dict[str, Any]]) -> None:
    for info in infos:
        print(f"== {info['worktree']}")
        if "problem" in info:
            print(f"no usable session: {info['problem']}")
        else:
            _print(info)


def status(config_path: Path, as_json: bool = False, rows: int = 10, every_worktree: bool = False) -> int:
    if every_worktree:
        infos = everywhere(config_path, rows)
        if as_json:
            print(json.dumps(infos, indent=2, default=str))
        else:
            _print_all(infos)
        return 0
    info = collect(open_session(config_path), rows)
    if as_json:
        print(json.dumps(info, indent=2, default=str))
    else:
        _print(info)
    return 0


def recover(config_path: Path) -> int:
    """Reset the session branch to the recorded best (if HEAD fell behind) and restore a damaged baseline."""
    session = open_session(config_path)
    record = session.started
    repo = gitops.open_repo(session.root)
    gitops.require_clean(repo)
    ref = gitops.read_ref(repo, gitops.best_ref(record.tag, session.lane_id))
    head = gitops.head_sha(repo)
    if ref and head != ref:
        if not repo.is_ancestor(head, ref) and not repo.is_ancestor(ref, head):
            raise Refused(f"HEAD {head[:10]} has diverged from the best {ref[:10]}; inspect with `git log` first")
        if repo.is_ancestor(head, ref):
            gitops.require_branch(repo, record.tag)
            repo.git.reset("--hard", ref)
            print(f"branch reset to the recorded best {ref[:10]}")
    folder = session.baseline_dir
    problems = manifest_problems(folder)
    damaged = problems is None or bool(problems)
    saved = gitops.read_ref(repo, gitops.baseline_ref(record.tag, session.lane_id))
    if damaged and saved:
        backup.restore_folder(repo, folder, saved)
        kept = read_json(folder / integrity.MANIFEST)["files"]
        for extra in set(integrity.manifest_of(folder)) - set(kept):
            (folder / extra).unlink()
        print(f"baseline of {session.lane_id} restored from {gitops.baseline_ref(record.tag, session.lane_id)}")
    elif damaged:
        raise Refused(f"the baseline in {folder} is damaged and has no saved copy; start a new session")
    print("nothing else to recover" if not damaged else "recovered")
    return 0
