"""`dit-ar fleet adopt --from TAG`: a commit kept in another session, put on this session's best to be judged here.

A keep is evidence about the slot it was timed in and the best it was judged against; speed-ups do not simply
add up. So an adopted commit is cherry-picked onto this session's best and judged again here as any candidate
(its declared class and description carried over). Nothing is merged. A conflict aborts the cherry-pick: the
branch and tree are as they were.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import git

from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status

from ..loop.guards.checks import check_best
from ..state import gitops, ledger
from ..state.ledger import LedgerRow
from ..state.paths import StatePaths
from ..state.session import open_session, read_record
from . import registry


def source_tree(repo: git.Repo, tag: str) -> Path:
    """The worktree of session `tag`: the fleet's record of it, else any worktree whose session has that tag."""
    owned = registry.owner_of(repo, tag)
    if owned is not None:
        return Path(owned[1].worktree)
    for tree in gitops.worktrees(repo):
        record = read_record(StatePaths(tree))
        if record is not None and record.tag == tag:
            return tree
    raise Refused(f"no session {tag!r} among this repository's worktrees (`dit-ar status --all` lists them)")


def source_keep(tree: Path, lane: str, commit: str) -> LedgerRow:
    """The keep to adopt: `commit` (a prefix will do) or the session's latest keep, on `lane`."""
    record = read_record(StatePaths(tree))
    if record is None or record.lane != lane:
        raise Refused(f"the session in {tree} runs lane {record.lane if record else None!r}, not {lane!r}: a keep is "
                      "adopted only by a session of the same lane")
    keeps = [r for r in ledger.read(StatePaths(tree).ledger) if r.status is Status.KEEP]
    if commit:
        keeps = [r for r in keeps if r.commit.startswith(commit)]
    if not keeps:
        raise Refused(f"session {record.tag} has no keep" + (f" at {commit}" if commit else "") + " to adopt")
    return keeps[-1]


def adopted(config_path: Path, tag: str, commit: str = "") -> tuple[str, str, str]:
    """Cherry-pick session `tag`'s keep onto this session's best (HEAD must be the best, the tree clean).
    Returns the adopted commit, its declared class and the description to judge it under."""
    session = open_session(config_path)
    record = session.require_current_layout()
    if tag == record.tag:
        raise Refused(f"session {tag} is this session: nothing to adopt")
    repo = gitops.open_repo(session.root)
    gitops.require_branch(repo, record.tag)
    gitops.require_clean(repo)
    best = check_best(session, repo, record.tag)
    if gitops.head_sha(repo) != best.commit:
        raise Refused(f"HEAD is not this session's best {best.commit[:10]}: adopt onto the best (judge or reset the "
                      "commit on top of it first)")
    keep = source_keep(source_tree(repo, tag), record.lane, commit)
    try:
        repo.git.cherry_pick("-x", keep.commit)
    except git.GitCommandError as exc:
        conflicted = repo.git.diff("--name-only", "--diff-filter=U").split()
        with contextlib.suppress(git.GitCommandError):
            repo.git.cherry_pick("--abort")
        if gitops.head_sha(repo) != best.commit or gitops.dirty_entries(repo):  # never left half-applied
            repo.git.reset("--hard", best.commit)
        why = f"conflicts with this session's best in {conflicted}" if conflicted else \
            (str(exc.stderr).strip().splitlines() or ["git refused it"])[-1]
        raise Refused(f"{tag}'s keep {keep.commit[:10]} ({keep.description!r}) does not apply here: {why}; the "
                      "cherry-pick was aborted, nothing changed") from None
    return keep.commit, keep.declared_class, f"adopted from {tag} ({keep.commit[:10]}): {keep.description}"
