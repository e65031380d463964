"""`dit-ar scaffold --custom` and the seam's contract check (pytest_dit_ar.worker.seam): the skeleton it writes
keeps the seam out of the box, each way of breaking it gets its own line, and every refusal writes nothing."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import git
import pytest
import torch

from dit_ar_contract.config import load_config
from dit_ar_contract.errors import Refused
from pytest_dit_ar.cli import scaffold as sc
from pytest_dit_ar.cli.main import build_parser
from pytest_dit_ar.cli.scaffold_custom import scaffold_custom
from pytest_dit_ar.worker.seam import check_seam, spec_from_config
from quality_suite.corpora import load_corpus

WRITTEN = ("config/autoresearch.json", "corpus/checksums.json", "corpus/custom-32.jsonl",
           "model_under_test/__init__.py", "model_under_test/pipeline.py", "tests/test_seam_contract.py",
           "program.md", "AGENTS.md", ".gitignore")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git.Repo.init(tmp_path / "repo")
    return tmp_path / "repo"


def custom(repo: Path, weights: Path | None = None, **flags) -> list[str]:
    lines: list[str] = []
    flags = {"device": "cpu", "resolution": 32, "steps": 2, "cases": 4, **flags}
    scaffold_custom(sc.Request(pipeline=Path(), **flags), weights, cwd=repo, out=lines.append)
    return lines


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One scaffolded repository for the tests that only read it."""
    repo = tmp_path_factory.mktemp("custom") / "repo"
    git.Repo.init(repo)
    custom(repo)
    return repo


def import_skeleton(repo: Path, name: str, edit: tuple[str, str] | None = None):
    """The scaffolded model_under_test, imported under a private name (the project's own stays untouched), with
    `edit` (old, new) applied to its pipeline.py."""
    package = repo / name
    package.mkdir()
    for f in ("__init__.py", "pipeline.py"):
        text = (repo / "model_under_test" / f).read_text()
        if edit and f == "pipeline.py":
            assert edit[0] in text, edit[0]
            text = text.replace(*edit)
        (package / f).write_text(text)
    sys.path.insert(0, str(repo))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(repo))


def test_the_skeleton_is_written_loads_and_keeps_the_seam(tmp_path: Path) -> None:
    git.Repo.init(tmp_path / "repo")
    repo = tmp_path / "repo"
    lines = custom(repo)
    for rel in WRITTEN:
        assert (repo / rel).is_file(), rel
    config = load_config(repo / "config" / "autoresearch.json")
    lane = config.lanes["custom-32"]
    assert lane.preset == "custom" and lane.weights is None and lane.resolution == 32
    assert len(load_corpus(repo / lane.corpus)) == 4  # checksummed like any frozen corpus
    assert "tests/" in config.fixed_paths and "model_under_test/" in config.mutable_paths
    assert any("pytest tests/test_seam_contract.py" in line for line in lines)
    assert {".venv/", "venv/"} <= set((repo / ".gitignore").read_text().splitlines())  # a venv is never committed
    module = import_skeleton(repo, "skeleton_ok")
    spec = spec_from_config(repo / "config" / "autoresearch.json", "custom-32")
    assert check_seam(module.build_pipeline, spec) == []
    assert "from pytest_dit_ar.worker.seam import check_seam" in (repo / "tests" / "test_seam_contract.py").read_text()


def problems_of(repo: Path, name: str, old: str, new: str) -> list[str]:
    """The contract's findings for the skeleton with `old` replaced by `new` in pipeline.py."""
    module = import_skeleton(repo, name, (old, new))
    return check_seam(module.build_pipeline, spec_from_config(repo / "config" / "autoresearch.json", "custom-32"))


@pytest.mark.parametrize(("case", "old", "new", "expected"), [
    ("range", "images = torch.sigmoid(rgb).float().clamp(0, 1)", "images = rgb.float() * 4",
     "needs values in [0, 1]"),
    ("size", "size=(self.resolution, self.resolution)", "size=(self.resolution // 2, self.resolution // 2)",
     "generate at spec['resolution']"),
    ("seeded", 'generator=torch.Generator("cpu").manual_seed(int(s))', "", "own torch.Generator"),
    ("stages", 'with record_function("decode"):', "if True:", "no stage range named decode"),
    ("components", 'return {"transformer": self.model}', 'return {"unet": self.model}',
     "'transformer' entry"),
    ("batch", "x = initial_noise(seeds, (LATENT_CHANNELS, side, side), self.device)",
     "x = initial_noise(seeds, (LATENT_CHANNELS, side, side), self.device)\n            x = x - x.mean(0)",
     "inside a batch"),
])
def test_each_broken_seam_gets_a_line_naming_the_fix(scaffolded: Path, case: str, old: str, new: str,
                                                    expected: str) -> None:
    found = problems_of(scaffolded, f"skeleton_{case}", old, new)
    assert any(expected in p for p in found), found


def test_a_build_that_raises_is_one_line(repo: Path) -> None:
    def build(spec):
        raise FileNotFoundError("weights.pt")

    found = check_seam(build, {"resolution": 32, "batch": 1})
    assert len(found) == 1 and "build_pipeline(spec) raised FileNotFoundError: weights.pt" in found[0]


def test_weights_are_recorded_and_a_missing_file_is_refused(repo: Path, tmp_path: Path, scaffolded: Path) -> None:
    with pytest.raises(Refused, match="--weights .*no such file"):
        custom(repo, tmp_path / "missing.pt")
    assert not (repo / "config").exists()  # refused: nothing written
    weights = repo / "weights" / "model.pt"
    weights.parent.mkdir()
    state = import_skeleton(scaffolded, "skeleton_state").load_model(None, "cpu").state_dict()
    torch.save({k: torch.zeros_like(v) for k, v in state.items()}, weights)
    custom(repo, weights)
    config = load_config(repo / "config" / "autoresearch.json")
    assert config.lanes["custom-32"].weights == "weights/model.pt" and "weights/model.pt" in config.fixed_paths
    module = import_skeleton(repo, "skeleton_weights")
    pipe = module.build_pipeline(spec_from_config(repo / "config" / "autoresearch.json", "custom-32"))
    assert all(float(v.abs().sum()) == 0 for v in pipe.components["transformer"].state_dict().values())


@pytest.mark.parametrize(("flags", "message"), [
    ({"resolution": 36}, "multiple of 8"),
    ({"lane": "My Lane"}, "lower-case"),
    ({"device": "tpu"}, "use cuda, cuda:N or cpu"),
    ({"cases": 99}, "the corpus template has"),
    ({"steps": 0}, "--steps must be at least 1"),
])
def test_bad_input_is_refused_and_nothing_written(repo: Path, flags: dict, message: str) -> None:
    with pytest.raises(Refused, match=message):
        custom(repo, **flags)
    assert [p.name for p in repo.iterdir()] == [".git"]


def test_existing_files_need_force_and_outside_git_is_refused(repo: Path, tmp_path: Path) -> None:
    custom(repo)
    before = (repo / "model_under_test" / "pipeline.py").read_text()
    (repo / "model_under_test" / "pipeline.py").write_text("# mine\n")
    with pytest.raises(Refused, match="exist already"):
        custom(repo)
    assert (repo / "model_under_test" / "pipeline.py").read_text() == "# mine\n"
    custom(repo, force=True)
    assert (repo / "model_under_test" / "pipeline.py").read_text() == before
    (tmp_path / "plain").mkdir()
    with pytest.raises(Refused, match="not inside a git repository"):
        custom(tmp_path / "plain")


@pytest.mark.parametrize(("argv", "message"), [
    (["scaffold"], "exactly one of --pipeline"),
    (["scaffold", "--custom", "--pipeline", "x"], "exactly one of --pipeline"),
    (["scaffold", "--pipeline", "x", "--weights", "w.pt"], "--weights goes with --custom"),
])
def test_the_verb_refuses_an_ambiguous_request(argv: list[str], message: str) -> None:
    args = build_parser().parse_args(argv)
    with pytest.raises(Refused, match=message):
        args.func(args)
