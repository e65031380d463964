"""`dit-ar status` (read-only) and `dit-ar recover` (puts the branch and the baseline back)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import backup, gitops, integrity, ledger
from .context import Context, load_context
from .errors import Refused
from .state import read_json

FAILURES = ("crash", "discard-scope", "discard-quality", "discard-performance")


def _head_relation(repo: Any, head: str, best: str | None) -> tuple[str, str | None]:
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


def collect(ctx: Context, rows: int) -> dict[str, Any]:
    repo = gitops.open_repo(ctx.root)
    head = gitops.head_sha(repo)
    best = ctx.best() or {}
    ref = gitops.read_ref(repo, gitops.best_ref(ctx.session["tag"], ctx.lane_id)) if ctx.session else None
    best_sha = ref or best.get("commit")
    relation, fix = _head_relation(repo, head, best_sha)
    all_rows = [r for r in ledger.read(ctx.paths.ledger) if r["lane"] == ctx.lane_id]
    baseline = read_json(ctx.baseline_dir / "baseline.json", {}) or {}
    manifest = read_json(ctx.baseline_dir / integrity.MANIFEST)
    baseline_ok = bool(manifest) and not integrity.diff(manifest["files"], integrity.manifest_of(ctx.baseline_dir))
    failures = []
    for row in [r for r in all_rows if r["status"] in FAILURES][-5:]:
        crash = ctx.root / row["run_dir"] / "crash.txt"
        detail = crash.read_text(errors="replace").strip().splitlines()[0] if crash.is_file() else row["quality_summary"]
        failures.append({"run_id": row["run_id"], "status": row["status"], "description": row["description"],
                         "detail": detail[:300], "run_dir": row["run_dir"]})
    return {
        "tag": ctx.session.get("tag"), "branch": gitops.current_branch(repo), "lane": ctx.lane.name,
        "lane_id": ctx.lane_id, "device": ctx.target.identity, "head": head,
        "best": {"commit": best.get("commit"), "ref": ref, "measurements": best.get("measurements")},
        "head_relation": relation, "fix": fix,
        "baseline": {"present": bool(manifest), "intact": baseline_ok, "commit": baseline.get("commit"),
                     "task_metrics": baseline.get("task_metrics"), "envelope": baseline.get("envelope"),
                     "median_ms": (baseline.get("timing") or {}).get("median_ms"),
                     "noise_floor_pct": (baseline.get("timing") or {}).get("noise_floor_pct")},
        "counts": {s: sum(r["status"] == s for r in all_rows) for s in ledger.STATUSES},
        "recent": all_rows[-rows:], "recent_failures": failures,
    }


def _print(info: dict[str, Any]) -> None:
    print(f"session {info['tag']}  branch {info['branch']}  lane {info['lane_id']} on {info['device'].get('name')}")
    best = info["best"]
    print(f"best {str(best['commit'])[:10]}  {best.get('measurements') or ''}")
    print(f"HEAD {info['head'][:10]}: {info['head_relation']}")
    if info["fix"]:
        print(f"  fix: {info['fix']}")
    b = info["baseline"]
    state = "intact" if b["intact"] else ("DAMAGED — run `dit-ar recover`" if b["present"] else "missing")
    print(f"baseline {state}; task metrics {b['task_metrics']}; median {b['median_ms']} ms; "
          f"A/A noise {b['noise_floor_pct']}%")
    print("counts: " + ", ".join(f"{k}={v}" for k, v in info["counts"].items()))
    if info["recent"]:
        print("recent:")
        for r in info["recent"]:
            print(f"  {r['timestamp'][:19]}  {r['status']:<20} {r['commit'][:8]}  {r['candidate'] or '-':>10}  "
                  f"{r['improvement_pct'] or '':>8}  {r['description'][:60]}")
    if info["recent_failures"]:
        print("recent failures:")
        for f in info["recent_failures"]:
            print(f"  {f['run_id']} {f['status']}: {f['detail']}  ({f['run_dir']})")


def status(config_path: Path, as_json: bool = False, rows: int = 10) -> int:
    ctx = load_context(config_path)
    info = collect(ctx, rows)
    if as_json:
        print(json.dumps(info, indent=2, default=str))
    else:
        _print(info)
    return 0


def recover(config_path: Path) -> int:
    """Reset the session branch to the recorded best (if HEAD fell behind) and restore a damaged baseline."""
    ctx = load_context(config_path)
    repo = gitops.open_repo(ctx.root)
    gitops.require_clean(repo)
    ref = gitops.read_ref(repo, gitops.best_ref(ctx.session["tag"], ctx.lane_id))
    head = gitops.head_sha(repo)
    if ref and head != ref:
        if not repo.is_ancestor(head, ref) and not repo.is_ancestor(ref, head):
            raise Refused(f"HEAD {head[:10]} has diverged from the best {ref[:10]}; inspect with `git log` first")
        if repo.is_ancestor(head, ref):
            gitops.require_branch(repo, ctx.session["tag"])
            repo.git.reset("--hard", ref)
            print(f"branch reset to the recorded best {ref[:10]}")
    folder = ctx.baseline_dir
    manifest = read_json(folder / integrity.MANIFEST)
    damaged = not manifest or bool(integrity.diff(manifest["files"], integrity.manifest_of(folder)))
    saved = gitops.read_ref(repo, gitops.baseline_ref(ctx.session["tag"], ctx.lane_id))
    if damaged and saved:
        backup.restore_folder(repo, folder, saved)
        kept = read_json(folder / integrity.MANIFEST)["files"]
        for extra in set(integrity.manifest_of(folder)) - set(kept):
            (folder / extra).unlink()
        print(f"baseline of {ctx.lane_id} restored from {gitops.baseline_ref(ctx.session['tag'], ctx.lane_id)}")
    elif damaged:
        raise Refused(f"the baseline in {folder} is damaged and has no saved copy; start a new session")
    print("nothing else to recover" if not damaged else "recovered")
    return 0

