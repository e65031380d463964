"""What an experiment's candidate may not change while it runs, and the checks around its run.

The pre-run refusals (`check_session`, `check_best`, `check_stack`) change nothing. `RunGuard` snapshots,
before candidate code runs, the ledger, the state files and the environment the harness relies on
(`state/tamper.py`); after the run `problems` is a query (it writes nothing), and `repair` puts back what can
be put back and writes HALT for what cannot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import git

from dit_ar_contract import versions
from dit_ar_contract.classes import ChangeClass
from dit_ar_contract.errors import Refused

from ...state import gitops, tamper
from ...state.best import BestRecord, require_best
from ...state.files import write_bytes_atomic
from ...state.roles import refuse_if_marked
from ...state.session import Session, SessionRecord, verify_integrity


@dataclass(frozen=True)
class RunDamage:
    """What a run changed that a candidate may not (`RunGuard.problems`): the problems in words, the files to put
    back (path -> the bytes before the run) and the environment changes that halt further experiments."""

    problems: tuple[str, ...] = ()
    restore: dict[Path, bytes] = field(default_factory=dict)
    environment: tuple[str, ...] = ()


def check_session(session: Session) -> SessionRecord:
    """The session's record, refusing a session of an earlier layout, a HALT left by an earlier run, or a device
    other than the baseline's."""
    record = session.require_current_layout()
    if session.paths.halt.exists():
        raise Refused(f"an earlier run changed what the harness relies on ({session.paths.halt}: "
                      f"{session.paths.halt.read_text().strip()[:300]}); inspect and repair that, then delete "
                      f"{session.paths.halt} to go on")
    if not record.device.same_device(session.target.identity):
        raise Refused(f"the session's baseline device is {record.device.name!r}, this run would use "
                      f"{session.target.identity.name!r}; start a new session")
    return record


def check_best(session: Session, repo: git.Repo, tag: str) -> BestRecord:
    """The lane's best, refusing when best.json and the best ref disagree, or while the best is marked
    role-dependent (state/roles.py: the refusal names the keep that introduced it and the way back)."""
    refuse_if_marked(session.paths, session.lane_id)
    best = require_best(session.best(), session.lane_id)
    ref = gitops.read_ref(repo, gitops.best_ref(tag, session.lane_id))
    if ref and ref != best.commit:
        raise Refused(f"best.json names {best.commit[:10]} but the best ref names {ref[:10]}; run `dit-ar status`")
    return best


def check_stack(recorded: dict) -> dict[str, str | None]:
    """This machine's software stack; refuse when torch, diffusers, CUDA or the driver changed since the baseline
    (timings and outputs would compare two stacks, not two commits)."""
    stack = versions.stack(versions.collect())
    changed = versions.stack_differences(recorded, stack)
    if changed:
        raise Refused(f"the software stack changed since the baseline ({'; '.join(changed)}): a new baseline is "
                      "needed: `dit-ar init --tag NEW` at the lane's original baseline commit, then "
                      "`dit-ar baseline` (or restore the recorded versions)")
    return stack


class RunGuard:
    """The ledger, state files and environment as they were before the candidate `commit` ran."""

    def __init__(self, session: Session, repo: git.Repo, commit: str, worktrees: list[Path], ledger_bytes: bytes):
        self.session, self.repo, self.commit, self.worktrees = session, repo, commit, worktrees
        self.ledger_bytes = ledger_bytes
        paths = session.paths
        self.state_bytes = {p: p.read_bytes() for p in (paths.session, paths.best, paths.integrity) if p.exists()}
        self.fingerprint = tamper.fingerprint(repo, worktrees)

    def environment_changes(self) -> list[str]:
        """What a run changed that the harness relies on and cannot make read-only for itself."""
        return tamper.changes(self.fingerprint, tamper.fingerprint(self.repo, self.worktrees))

    def problems(self) -> RunDamage:
        """What the candidate may have changed while it ran: fixed files, baseline, ledger, state, git and the
        environment. A query: it writes nothing (`repair` puts back what can be put back)."""
        session, repo = self.session, self.repo
        problems = verify_integrity(session)
        try:
            session.verified_baseline()
        except Refused as exc:
            problems.append(f"baseline: {exc}")
        restore: dict[Path, bytes] = {}
        ledger = session.paths.ledger
        current = ledger.read_bytes() if ledger.exists() else b""
        if current != self.ledger_bytes:
            problems.append("the ledger changed while the candidate ran (restored)")
            restore[ledger] = self.ledger_bytes
        for path, data in self.state_bytes.items():
            if not path.exists() or path.read_bytes() != data:
                problems.append(f"{path.name} changed while the candidate ran (restored)")
                restore[path] = data
        if gitops.head_sha(repo) != self.commit or \
                gitops.current_branch(repo) != gitops.branch_name(session.started.tag):
            problems.append("HEAD or the branch moved while the candidate ran")
        dirty = gitops.dirty_entries(repo)
        if dirty:
            problems.append(f"the candidate left changes in the tree: {dirty[:5]}")
        changed = tuple(self.environment_changes())
        if changed:
            problems.append(f"the run changed what the harness relies on: {list(changed[:5])}; experiments refuse "
                            f"until {session.paths.halt} is deleted")
        return RunDamage(tuple(problems), restore, changed)

    def repair(self, damage: RunDamage) -> None:
        """Put back the ledger and state files the run changed, and write HALT for environment changes (what the
        harness relies on and cannot restore itself)."""
        for path, data in damage.restore.items():
            write_bytes_atomic(path, data)
        if damage.environment:
            self.session.paths.halt.write_text("\n".join(damage.environment) + "\n")


def check_case_budget(session: Session, declared: str, task_base: dict[str, float]) -> None:
    """Refuse an approximate or quantization candidate (declared, or inherited from the best) on a lane whose case
    budget cannot pass that class (n_min or n_pass beyond the budget): its tests would only spend the budget to
    fail. The refusal names the budget needed and the key that raises it (quality_suite/refusal.py)."""
    from quality_suite import refusal
    from quality_suite.corpora import load_corpus

    best = session.best()
    inherited = best.effective_class if best else ChangeClass.EXACT.word
    cls = ChangeClass.from_word(declared).raised_to(inherited)
    if not cls.judged_on_the_task:
        return
    classes = {cls.word} | ({ChangeClass.APPROXIMATE.word} if inherited == ChangeClass.APPROXIMATE.word else set())
    lane = session.lane
    corpus = len(load_corpus(session.root / lane.corpus))
    short = refusal.shortfall_lines(lane.name, lane.quality, corpus, lane.task_metrics, task_base, tuple(classes))
    if short:
        raise Refused("; ".join(short) + "; nothing ran (`dit-ar doctor` lists each lane's case budget)")
