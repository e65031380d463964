"""The way out when a refusal leaves commits on the branch that no verdict judged.

A refusal changes nothing, so a candidate commit stays where it was. What then gets the user out is either what
the refusal names (fix it, run again) or setting the commit aside: `git reset --hard <best>`, the commit staying in
`git reflog`. `dit-ar experiment` prints this after its refusal; `dit-ar status` and `dit-ar recover` say the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import git

from dit_ar_contract.errors import Refused

from . import gitops
from .best import read_best
from .paths import StatePaths
from .session import read_record


@dataclass(frozen=True)
class Unjudged:
    """HEAD is `commits` commits on top of the recorded best that no verdict has judged."""

    head: str
    best: str
    commits: int

    @property
    def set_aside(self) -> str:
        """The command that leaves them, and how to get them back."""
        stay = "the commit stays" if self.commits == 1 else "the commits stay"
        return (f"`git reset --hard {self.best[:10]}` (the recorded best; {stay} in `git reflog`, and "
                f"`git cherry-pick -n {self.head[:10]}` brings HEAD's changes back)")

    @property
    def way_out(self) -> str:
        """After a refusal: fix what it names and judge again, or set the commits aside."""
        again = "`dit-ar experiment` judges the commit" if self.commits == 1 else \
            f"squash the {self.commits} commits into one (`git reset --soft {self.best[:10]} && git commit`) for " \
            "`dit-ar experiment`"
        return f"fix what the refusal names, then {again}; or set {self._them} aside: {self.set_aside}"

    @property
    def _them(self) -> str:
        return f"the commit {self.head[:10]}" if self.commits == 1 else f"the {self.commits} commits"


def unjudged(root: Path) -> Unjudged | None:
    """The commits on top of the session's recorded best (None: no session or best, HEAD is the best, behind
    it or elsewhere: then `dit-ar status` and `recover` name their own fix)."""
    paths = StatePaths(root)
    record = read_record(paths)
    best = read_best(paths).get(record.lane_id) if record else None
    if best is None:
        return None
    try:
        repo = gitops.open_repo(root)
        head = gitops.head_sha(repo)
        if head == best.commit or not repo.is_ancestor(best.commit, head):
            return None
        return Unjudged(head, best.commit, int(repo.git.rev_list("--count", f"{best.commit}..{head}")))
    except (Refused, git.GitCommandError, ValueError):
        return None


def session_way_out(config_path: Path) -> str:
    """What gets the user out of a refusal that left unjudged commits on the branch ('' when none are there)."""
    from dit_ar_contract.config import repo_root_for

    left = unjudged(repo_root_for(config_path))
    return left.way_out if left is not None else ""
