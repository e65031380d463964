"""Every candidate the fleet has judged, keyed by what it is: its tree against its best's tree, on a lane.

One file for all sessions of a repository (`<git common dir>/dit-ar-fleet/judged.jsonl`, appended under a file
lock by each session's own process after it records a verdict). A candidate whose tree was already judged against
the same best tree anywhere in the fleet is refused with a pointer to that run, so two agents with one idea do not
both spend a slot on it, and a discard is not re-rolled. `dit-ar fleet adopt` judges a commit kept elsewhere again
here on purpose, and is not refused.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import git
from filelock import FileLock

from dit_ar_contract.errors import Refused

from ..state.ledger import LedgerRow
from ..state.session import Session

FOLDER = "dit-ar-fleet"


@dataclass(frozen=True)
class JudgedCandidate:
    lane: str
    best_tree: str
    candidate_tree: str
    tag: str
    run_id: str
    status: str
    commit: str
    worktree: str
    run_dir: str
    description: str

    @property
    def key(self) -> tuple[str, str, str]:
        return self.lane, self.best_tree, self.candidate_tree


def common_folder(repo: git.Repo) -> Path:
    """The repository's shared git folder (the same for every worktree), where the fleet keeps its files."""
    common = Path(repo.git.rev_parse("--git-common-dir"))
    return (common if common.is_absolute() else Path(repo.working_dir) / common).resolve() / FOLDER


def tree_of(repo: git.Repo, commit: str) -> str:
    return repo.commit(commit).tree.hexsha


def entries(repo: git.Repo) -> list[JudgedCandidate]:
    path = common_folder(repo) / "judged.jsonl"
    if not path.is_file():
        return []
    out = []
    known = {f.name for f in dataclasses.fields(JudgedCandidate)}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
            out.append(JudgedCandidate(**{k: str(v) for k, v in data.items() if k in known}))
        except (ValueError, TypeError):
            continue  # a torn last line of a killed writer
    return out


def find(repo: git.Repo, lane: str, best: str, commit: str) -> JudgedCandidate | None:
    key = (lane, tree_of(repo, best), tree_of(repo, commit))
    return next((e for e in reversed(entries(repo)) if e.key == key), None)


def refuse_duplicate(repo: git.Repo, session: Session, best: str, commit: str) -> None:
    """Refuse a candidate whose tree was judged against this best's tree on this lane anywhere in the fleet."""
    earlier = find(repo, session.lane_id, best, commit)
    if earlier is None:
        return
    where = Path(earlier.worktree) / earlier.run_dir
    raise Refused(f"this candidate (tree {earlier.candidate_tree[:10]}) was already judged against the same best "
                  f"(tree {earlier.best_tree[:10]}) on lane {earlier.lane}: session {earlier.tag}, run "
                  f"{earlier.run_id}, {earlier.status.upper()} ({earlier.description!r}; {where}). "
                  f"Nothing was judged: change the idea, or judge that session's keep again here with "
                  f"`dit-ar fleet adopt --from {earlier.tag}`")


def add(repo: git.Repo, session: Session, row: LedgerRow) -> JudgedCandidate:
    """Note a recorded verdict (the session's own process, after the ledger row)."""
    entry = JudgedCandidate(session.lane_id, tree_of(repo, row.parent), tree_of(repo, row.commit),
                            session.started.tag, row.run_id, row.status.word, row.commit, str(session.root),
                            row.run_dir, row.description)
    folder = common_folder(repo)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "judged.jsonl"
    with FileLock(str(path) + ".lock", timeout=30):
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(dataclasses.asdict(entry)) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    return entry
