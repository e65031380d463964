"""Every candidate the fleet has sent or judged, keyed by what it is: its tree against its best's tree, on a lane.

One file for all sessions of a repository (`<git common dir>/dit-ar-fleet/judged.jsonl`), appended under a file
lock by each session's own process. Three events:

- `claim`: a session's driver is about to send the candidate (checked and written under the lock, so two sessions
  cannot both send one tree). A claim is live while its session's dispatch record names its run; a claim whose
  judging ended without a verdict (a refusal, a harness error) is released (`release`), and one whose driver died
  before it sent anything lapses with its dispatch record.
- `judged`: the verdict was recorded (the session's ledger row).
- `release`: the claim's judging ended without a verdict, and why.

A candidate is refused (nothing sent) when the same tree was judged or is claimed against the same best tree on
the same lane anywhere in the fleet, or when it is a near-duplicate (`normal_diff` below: the same diff with comments
and layout stripped) of one claimed now or judged and discarded (a crash included), so two agents with one idea do
not both spend a slot on it, and a discard is not re-rolled with a comment. `dit-ar fleet adopt` judges a commit
kept elsewhere again here on purpose, and is not refused.

Near-duplicates (`normal_diff`): the candidate's diff against the best with comments and layout stripped, digested.
Per changed file (git's diff of the two commits):

- Python (`.py`): the token stream (`tokenize`) without COMMENT, NL and ENCODING tokens and without the text of
  INDENT, DEDENT and NEWLINE (only that they are there), so comments, blank lines, trailing spaces, line breaks
  inside brackets and the width of indentation do not count. Strings count, docstrings included: a program can read
  its own docstrings (`__doc__`), so a changed docstring is a changed program. A file that does not tokenize
  falls back to the rule for other text.
- Other text: its whitespace-separated words (layout does not count; comments do, whatever their syntax).
- Binary files: their bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path

import git
from filelock import FileLock

from dit_ar_contract.errors import Refused
from dit_ar_contract.status import Status

from ..state import ledger
from ..state.ledger import LedgerRow
from ..state.paths import StatePaths
from ..state.session import Session
from . import dispatch as dispatch_file

FOLDER = "dit-ar-fleet"
CLAIM, JUDGED, RELEASE = "claim", "judged", "release"
LOCK_TIMEOUT_S = 30


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
    normal: str = ""  # the diff against the best without comments and layout (normal_diff); "" in older files
    event: str = JUDGED
    reason: str = ""  # a release's: why its judging ended without a verdict
    at: float = 0.0

    @property
    def key(self) -> tuple[str, str, str]:
        return self.lane, self.best_tree, self.candidate_tree

    @property
    def discarded(self) -> bool:
        return self.event == JUDGED and self.status not in ("", Status.KEEP.word)

    def describe(self) -> str:
        where = Path(self.worktree) / self.run_dir if self.run_dir else Path(self.worktree)
        what = "being judged now" if self.event == CLAIM else self.status.upper()
        return f"session {self.tag}, run {self.run_id}, {what} ({self.description!r}; {where})"


@dataclass(frozen=True)
class Claim:
    """What a driver is about to send: its run, its best and its candidate commit."""

    run_id: str
    best: str
    commit: str
    description: str


def common_folder(repo: git.Repo) -> Path:
    """The repository's shared git folder (the same for every worktree), where the fleet keeps its files."""
    common = Path(repo.git.rev_parse("--git-common-dir"))
    return (common if common.is_absolute() else Path(repo.working_dir) / common).resolve() / FOLDER


def _path(repo: git.Repo) -> Path:
    return common_folder(repo) / "judged.jsonl"


def tree_of(repo: git.Repo, commit: str) -> str:
    return repo.commit(commit).tree.hexsha


def entries(repo: git.Repo) -> list[JudgedCandidate]:
    path = _path(repo)
    if not path.is_file():
        return []
    out = []
    known = {f.name for f in dataclasses.fields(JudgedCandidate)}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
            out.append(JudgedCandidate(**{k: (float(v) if k == "at" else str(v)) for k, v in data.items()
                                          if k in known}))
        except (ValueError, TypeError):
            continue  # a torn last line of a killed writer
    return out


def _in_flight(entry: JudgedCandidate) -> bool:
    """A claim's session still has its judging in hand (its dispatch record names the run) and has not recorded it."""
    record = dispatch_file.read(StatePaths(Path(entry.worktree)))
    if record is None or record.run_id != entry.run_id:
        return False
    rows = StatePaths(Path(entry.worktree)).ledger
    return not (rows.exists() and any(r.run_id == entry.run_id for r in ledger.read(rows)))


def live(all_entries: list[JudgedCandidate]) -> list[JudgedCandidate]:
    """The judged entries, and the claims still in flight (neither judged, released nor lapsed)."""
    ended = {e.run_id for e in all_entries if e.event in (JUDGED, RELEASE)}
    return [e for e in all_entries
            if e.event == JUDGED or (e.event == CLAIM and e.run_id not in ended and _in_flight(e))]


def find(repo: git.Repo, lane: str, best: str, commit: str, normal: str = "") -> JudgedCandidate | None:
    """The latest judging or live claim that this candidate repeats: the same tree, or (with `normal`) the same
    change without comments and layout of one in flight or discarded."""
    key = (lane, tree_of(repo, best), tree_of(repo, commit))
    found = live(entries(repo))
    same = next((e for e in reversed(found) if e.key == key), None)
    if same is not None or not normal:
        return same
    return next((e for e in reversed(found) if e.key[:2] == key[:2] and e.normal == normal
                 and (e.event == CLAIM or e.discarded)), None)


def _refusal(earlier: JudgedCandidate, near: bool) -> Refused:
    how = "being judged now" if earlier.event == CLAIM else "already judged"
    what = ("differs only in comments and layout from one " if near else
            f"(tree {earlier.candidate_tree[:10]}) {'is' if earlier.event == CLAIM else 'was'} ")
    why = " (a near-duplicate: the same change, comments and layout aside)" if near else ""
    return Refused(f"this candidate {what}{how} against the same best (tree {earlier.best_tree[:10]}) on lane "
                   f"{earlier.lane}{why}: {earlier.describe()}. Nothing was judged: change the idea, or judge that "
                   f"session's keep again here with `dit-ar fleet adopt --from {earlier.tag}`")


def _append(repo: git.Repo, entry: JudgedCandidate) -> None:
    path = _path(repo)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(dataclasses.asdict(entry)) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _lock(repo: git.Repo) -> FileLock:
    folder = common_folder(repo)
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(str(folder / "judged.jsonl.lock"), timeout=LOCK_TIMEOUT_S)


def _entry(repo: git.Repo, session: Session, best: str, commit: str, run_id: str, event: str, **rest: str
           ) -> JudgedCandidate:
    return JudgedCandidate(session.lane_id, tree_of(repo, best), tree_of(repo, commit), session.started.tag, run_id,
                           rest.pop("status", ""), commit, str(session.root), rest.pop("run_dir", ""),
                           rest.pop("description", ""), normal_diff(repo, best, commit), event,
                           rest.pop("reason", ""), time.time())


def claim(repo: git.Repo, session: Session, what: Claim, check: bool = True) -> JudgedCandidate:
    """Claim the candidate for this session's driver, refused when it repeats a live claim or a judging (`check`
    off: an adopted keep, judged again here on purpose). The session's dispatch record must name the run first."""
    entry = _entry(repo, session, what.best, what.commit, what.run_id, CLAIM, description=what.description)
    with _lock(repo):
        if check:
            earlier = find(repo, session.lane_id, what.best, what.commit, entry.normal)
            if earlier is not None:
                raise _refusal(earlier, earlier.candidate_tree != entry.candidate_tree)
        _append(repo, entry)
    return entry


def add(repo: git.Repo, session: Session, row: LedgerRow) -> JudgedCandidate:
    """Note a recorded verdict (the session's own process, after the ledger row); once per run."""
    entry = _entry(repo, session, row.parent, row.commit, row.run_id, JUDGED, status=row.status.word,
                   run_dir=row.run_dir, description=row.description)
    with _lock(repo):
        if not any(e.run_id == row.run_id and e.event == JUDGED for e in entries(repo)):
            _append(repo, entry)
    return entry


def release(repo: git.Repo, session: Session, run_id: str, reason: str) -> bool:
    """Release this session's claim of `run_id` (its judging ended without a verdict); whether there was one."""
    with _lock(repo):
        every = entries(repo)
        held = next((e for e in reversed(every) if e.run_id == run_id and e.event == CLAIM
                     and e.worktree == str(session.root)), None)
        if held is None or any(e.run_id == run_id and e.event in (JUDGED, RELEASE) for e in every):
            return False
        _append(repo, dataclasses.replace(held, event=RELEASE, reason=reason, at=time.time()))
    return True


# -- near-duplicates: the change as code, not as text ------------------------------------------------------
DROPPED = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING}
MARKERS = {tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE, tokenize.ENDMARKER}


def python_tokens(text: str) -> str | None:
    """The code of a Python file without comments and layout (None when it does not tokenize)."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in DROPPED:
                continue
            out.append(tokenize.tok_name[tok.type] if tok.type in MARKERS else f"{tok.type}:{tok.string}")
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return "\x00".join(out)


def normal_text(path: str, data: bytes) -> bytes:
    """A file's content as far as near-duplicates go (the module's rules)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return b"binary\x00" + data
    if path.endswith(".py"):
        tokens = python_tokens(text)
        if tokens is not None:
            return b"python\x00" + tokens.encode()
    return b"text\x00" + " ".join(text.split()).encode()


def _blob(commit: git.Commit, path: str) -> bytes | None:
    try:
        return commit.tree[path].data_stream.read()
    except KeyError:
        return None


def normal_diff(repo: git.Repo, best: str, candidate: str) -> str:
    """sha256 of the candidate's diff against the best with comments and layout stripped: each changed path whose
    normal content differs, with both sides' normal content. A change of comments and layout only digests to the
    same value as no change at all."""
    ours, theirs = repo.commit(best), repo.commit(candidate)
    h = hashlib.sha256()
    for path in sorted(p for p in repo.git.diff("--no-renames", "--name-only", best, candidate).splitlines() if p):
        before, after = _blob(ours, path), _blob(theirs, path)
        a = normal_text(path, before) if before is not None else b"absent"
        b = normal_text(path, after) if after is not None else b"absent"
        if a != b:
            h.update(path.encode() + b"\x01" + hashlib.sha256(a).digest() + hashlib.sha256(b).digest())
    return h.hexdigest()
