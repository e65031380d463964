"""A user's scaffolded repository with a session on its branch, made in-process (no worker, no CLI process): the
scaffold of a PixArt-Sigma folder without weights on a CPU lane, committed, then the session's state files as
`dit-ar init` and `dit-ar baseline` would leave them (session.json, best.json, integrity.json; no baseline
outputs). For the unit tests of what happens to a commit before anything of it runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import git

from dit_ar_contract.config import load_config
from dit_ar_contract.device import DeviceIdentity, cpu_name
from pytest_dit_ar.cli import scaffold as sc
from pytest_dit_ar.state import gitops, integrity
from pytest_dit_ar.state.best import BestRecord
from pytest_dit_ar.state.files import write_json_atomic
from pytest_dit_ar.state.paths import StatePaths
from pytest_dit_ar.state.session import LAYOUT, SessionRecord

TAG = "mine"


@dataclass(frozen=True)
class UserRepo:
    root: Path
    repo: git.Repo
    lane: str
    best: str

    @property
    def config(self) -> Path:
        return self.root / "config" / "autoresearch.json"

    @property
    def corpus(self) -> Path:
        return self.root / "corpus" / f"{self.lane}.jsonl"

    def commit(self, message: str) -> str:
        self.repo.git.add("-A")
        self.repo.git.commit("-qm", message)
        return self.repo.head.commit.hexsha


def user_repo(tmp_path: Path) -> UserRepo:
    """The repository at its best (= its baseline commit) on branch autoresearch/mine, the best's worktree made."""
    root = tmp_path / "my-project"
    repo = git.Repo.init(root)
    repo.git.config("user.email", "tests@example.invalid")
    repo.git.config("user.name", "dit-ar tests")
    pipe = tmp_path / "pipe"
    pipe.mkdir()
    (pipe / "model_index.json").write_text(json.dumps({"_class_name": "PixArtSigmaPipeline"}))
    sc.scaffold(sc.Request(pipeline=pipe, device="cpu", cases=4), cwd=root, out=lambda line: None)
    repo.git.add("-A")
    repo.git.commit("-qm", "Set up dit-ar")
    repo.git.checkout("-qb", gitops.branch_name(TAG))
    config = load_config(root / "config" / "autoresearch.json")
    lane, best = config.default_lane, repo.head.commit.hexsha
    paths = StatePaths(root)
    gitops.exclude_state_dir(repo)
    record = SessionRecord(tag=TAG, branch=gitops.branch_name(TAG), lane=lane, lane_id=lane,
                           device=DeviceIdentity("cpu", name=cpu_name()), on_target=True, baseline_commit=best,
                           init_time="", config=str(config.path), config_sha256=config.sha256, layout=LAYOUT,
                           seed_key="a session's secret")
    write_json_atomic(paths.session, record.as_dict())
    write_json_atomic(paths.integrity, {"files": integrity.snapshot(root, config.fixed_paths),
                                        "config_sha256": config.sha256})
    ref = gitops.best_ref(TAG, lane)
    gitops.set_ref(repo, ref, best)
    write_json_atomic(paths.best, {lane: BestRecord(best, TAG, gitops.branch_name(TAG), "baseline-run", "",
                                                    ref).as_dict()})
    gitops.sync_worktree(repo, paths.best_worktree, best)
    return UserRepo(root, repo, lane, best)
