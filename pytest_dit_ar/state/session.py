"""One research session: the config, the lane and its device, the state paths and session.json.

`session.json` is written by `dit-ar init`; `open_session` reads it back with the config and pins the
lane to a device. `LAYOUT` marks sessions made by this layout of the harness; an older session can still
be read by `status` and `report`, while verbs that change state refuse it with the migration to take.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dit_ar_contract import device
from dit_ar_contract.config import Config, Lane, load_config, parse_config, repo_root_for
from dit_ar_contract.device import DeviceIdentity, LaneTarget
from dit_ar_contract.errors import Refused

from . import integrity
from .baseline import BaselineSummary, verify_baseline
from .best import BestRecord, read_best
from .executor import SLOT_DEVICE, ExecutorChoice
from .files import read_json
from .paths import StatePaths
from .writer import judge_process

LAYOUT = 2  # layered packages (dit_ar_contract, pytest_dit_ar.{state,worker,loop,...}); 1 = the flat package
MIGRATION = ("this session was made by an earlier layout of pytest-dit-ar (its integrity snapshot names the "
             "old flat modules); finish reading it with `dit-ar status` / `dit-ar report`, then start a new "
             "session with `dit-ar init --tag NEW`")


@dataclass(frozen=True)
class LaneBaseline:
    manifest_sha256: str
    commit: str
    run_id: str


@dataclass(frozen=True)
class SessionRecord:
    """The contents of session.json."""

    tag: str
    branch: str
    lane: str
    lane_id: str
    device: DeviceIdentity
    on_target: bool
    baseline_commit: str
    init_time: str
    config: str
    config_sha256: str
    baselines: dict[str, LaneBaseline] = field(default_factory=dict)
    layout: int = 1
    seed_key: str = ""  # keys the corpus seeds the workers see (loop.quality.generation); never shown to a worker
    new_origin_from: str = ""  # set by `init --new-baseline`: the lane's earlier baseline commit(s) this replaces
    executor: ExecutorChoice = field(default_factory=ExecutorChoice)  # where judging runs (state/executor.py)

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["device"] = self.device.as_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["device"] = DeviceIdentity.from_dict(data.get("device"))
        values["baselines"] = {k: LaneBaseline(**v) for k, v in (data.get("baselines") or {}).items()}
        values["executor"] = ExecutorChoice.from_dict(data.get("executor"))
        return cls(**values)

    def with_baseline(self, lane_id: str, baseline: LaneBaseline) -> SessionRecord:
        return dataclasses.replace(self, baselines={**self.baselines, lane_id: baseline})


def read_record(paths: StatePaths) -> SessionRecord | None:
    data = read_json(paths.session, {}) or {}
    return SessionRecord.from_dict(data) if data else None


@dataclass
class Session:
    config: Config
    lane: Lane
    target: LaneTarget
    paths: StatePaths
    record: SessionRecord | None = None

    @property
    def root(self) -> Path:
        return self.config.root

    @property
    def lane_id(self) -> str:
        return self.target.lane_id

    @property
    def baseline_dir(self) -> Path:
        return self.paths.baseline(self.lane_id)

    @property
    def started(self) -> SessionRecord:
        """The session record; refuses when `dit-ar init` has not run."""
        if self.record is None:
            raise no_session(self.paths, self.config.path)
        return self.record

    def require_current_layout(self) -> SessionRecord:
        record = self.started
        if record.layout < LAYOUT:
            raise Refused(MIGRATION)
        return record

    def best(self) -> BestRecord | None:
        return read_best(self.paths).get(self.lane_id)

    def verified_baseline(self) -> BaselineSummary:
        """The lane's baseline, checked against its manifest and session.json's copy of the manifest hash."""
        pointer = self.started.baselines.get(self.lane_id)
        return verify_baseline(self.baseline_dir, self.lane_id, pointer.manifest_sha256 if pointer else None)


def no_session(paths: StatePaths, config_path: str | Path) -> Refused:
    """The one refusal for a command that needs a session where `dit-ar init` has not run."""
    return Refused(f"no session in {paths.dir}: run `dit-ar --config {config_path} init --tag T` first")


def open_session(config_path: str | Path, lane: str | None = None, need_session: bool = True,
                 config: Config | None = None) -> Session:
    """Load config and session; the lane is the session's unless given; refuse when it cannot run here. `config`:
    the config to use instead of the file's (the best commit's, for a commit that changed the file)."""
    config = config or load_config(config_path)
    paths = StatePaths(config.root)
    record = read_record(paths)
    if need_session and record is None:
        raise no_session(paths, config_path)
    if need_session and record and lane and lane != record.lane:
        raise Refused(f"the session (tag {record.tag}) runs lane {record.lane!r}, not {lane!r}; "
                      f"start a new session with `dit-ar init --tag T --lane {lane}`")
    lane_obj = config.lane(lane, record.lane if record else None)
    if record is not None and record.executor.remote and judge_process() is None:  # a fleet session's driver
        return Session(config, lane_obj, slot_target(record), paths, record)
    target = device.resolve_lane(config, lane_obj)
    if not target.runnable:
        raise Refused(f"lane {lane_obj.name!r} cannot run here: {target.problem}")
    return Session(config, lane_obj, target, paths, record)


def best_commit_config(config_path: str | Path) -> Config | None:
    """The config as the session's best commit holds it: the session's own, whatever a candidate commit did to the
    file, checked against the best commit's files (its worktree: a commit may also have deleted the corpus); the
    file itself where git does not track it. None without a session and best, or when it does not load."""
    import git

    paths = StatePaths(repo_root_for(config_path))
    record = read_record(paths)
    best = read_best(paths).get(record.lane_id) if record else None
    if best is None:
        return None
    try:
        repo = git.Repo(paths.root)
        relative = Path(config_path).resolve().relative_to(Path(repo.working_dir).resolve())
        text = repo.git.show(f"{best.commit}:{relative.as_posix()}", strip_newline_in_stdout=False)
    except (ValueError, git.GitCommandError, git.InvalidGitRepositoryError, git.NoSuchPathError):
        text, relative = None, None
    try:
        if text is None or relative is None:
            return load_config(config_path)
        config = parse_config(text, _checkout_of(paths, best.commit) / relative)
    except Refused:
        return None
    return dataclasses.replace(config, path=Path(config_path).resolve(), root=paths.root)


def _checkout_of(paths: StatePaths, commit: str) -> Path:
    """A folder holding `commit`'s files: the best's worktree when it is there, else the repository itself."""
    import git

    try:
        return paths.best_worktree if git.Repo(paths.best_worktree).head.commit.hexsha == commit else paths.root
    except (ValueError, git.InvalidGitRepositoryError, git.NoSuchPathError):
        return paths.root


def slot_target(record: SessionRecord) -> LaneTarget:
    """A fleet session's lane as its driver sees it: the device its slot was found to have at `init`, never
    probed here (its workers run only in the slot; `launch.launcher_for` refuses to start one here)."""
    return LaneTarget(record.lane, record.lane_id, SLOT_DEVICE + record.executor.slot, record.device,
                      record.on_target)


def session_lane_name(config: Config, explicit: str | None = None) -> str:
    """Which lane a command without a loaded session means (read-only; never refuses for the device)."""
    record = read_record(StatePaths(config.root))
    return config.lane_name(explicit, record.lane if record else None)


# what gets out of a difference in the fixed files that no commit of the session made (a file outside git, such as a
# weights folder, changed; or the installed harness)
INTEGRITY_WAY_OUT = ("put the fixed files back as they were at `dit-ar init` (`git status` shows tracked ones; a file "
                     "outside git, such as weights, from where it came), or start a new session on them as they are: "
                     "`dit-ar init --tag NEW` at the lane's baseline commit, then `dit-ar baseline`")


def verify_integrity(session: Session) -> list[str]:
    """Fixed files and the config against integrity.json; returns the differences (empty when intact)."""
    recorded = read_json(session.paths.integrity)
    if not recorded:
        raise Refused(f"{session.paths.integrity} is missing: run `dit-ar init` again")
    problems = integrity.diff(recorded["files"], integrity.snapshot(session.root, session.config.fixed_paths))
    if recorded.get("config_sha256") != session.config.sha256:
        problems.append(f"changed: {session.config.path.relative_to(session.root)} (config)")
    return problems
