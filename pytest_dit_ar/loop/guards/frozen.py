"""A candidate commit that changes what the harness freezes, found from git and the session's records alone.

The corpus, the config, the judge, the program, the tests and the harness are frozen: a commit that touches any
of them is a DISCARD-SCOPE (reset, one ledger row, the way back printed), whatever the change broke on the way: a
corpus whose checksum no longer matches, a config that no longer parses, a `mutable_paths` that now claims
everything. So this check runs before anything the commit could have broken is read. Which paths are mutable comes
from the config as the *best commit* holds it (the session's own config: a commit cannot widen its own scope);
which commit is the best comes from `.autoresearch/` (never part of a commit).

Only HEAD's own commit is looked at. A fixed file that differs without the commit changing it (a weights folder
edited outside git, a baseline folder tampered with) is not the commit's fault: the usual guards refuse it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dit_ar_contract.config import Config, repo_root_for
from dit_ar_contract.errors import Refused

from ...state import gitops
from ...state.best import read_best
from ...state.paths import StatePaths
from ...state.session import best_commit_config, read_record


@dataclass(frozen=True)
class FrozenTouch:
    """HEAD, one commit on the recorded best, changes `outside` (paths outside the best's mutable paths)."""

    commit: str
    parent: str
    outside: tuple[str, ...]
    config: Config  # the best commit's config: the one the discard is recorded and reset under

    @property
    def reason(self) -> str:
        shown = list(self.outside[:8]) + ([f"... {len(self.outside) - 8} more"] if len(self.outside) > 8 else [])
        return f"the commit changes paths outside {list(self.config.mutable_paths)}: {shown}"


def touched(config_path: Path) -> FrozenTouch | None:
    """What HEAD's commit changes outside the mutable paths; None when it changes nothing frozen, or when HEAD is
    not exactly one commit on the session's recorded best with a clean tree (the usual guards then say why)."""
    root = repo_root_for(config_path)
    paths = StatePaths(root)
    record = read_record(paths)
    best = read_best(paths).get(record.lane_id) if record else None
    if record is None or best is None:
        return None
    try:
        repo = gitops.open_repo(root)
        if gitops.current_branch(repo) != gitops.branch_name(record.tag) or gitops.dirty_entries(repo):
            return None
        head = repo.head.commit
    except (Refused, ValueError):  # not a repository, no commits
        return None
    if len(head.parents) != 1 or head.parents[0].hexsha != best.commit:
        return None
    config = best_commit_config(Path(config_path))
    if config is None:
        return None
    changed = tuple(p for p in repo.git.diff("--no-renames", "--name-only", best.commit, head.hexsha).splitlines()
                    if p)
    outside = tuple(gitops.out_of_scope(changed, config.mutable_paths))
    return FrozenTouch(head.hexsha, best.commit, outside, config) if outside else None
