"""`dit-ar scaffold`: the files it writes for each supported pipeline class, from a fake pipeline folder (only
model_index.json and, where a test needs them, component configs), and its refusals. The generated model
code is only compiled here; tests/e2e/test_scaffold.py runs it on tiny real pipelines."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from dit_ar_contract.config import load_config
from dit_ar_contract.device import cpu_name
from dit_ar_contract.errors import Refused
from pytest_dit_ar.cli import scaffold as sc
from pytest_dit_ar.cli import scaffold_files
from pytest_dit_ar.cli.main import build_parser, experiment_pytest_args
from pytest_dit_ar.loop.guards.selection import selects_suites
from pytest_dit_ar.loop.guards.suites import suite_files
from quality_suite.corpora import load_corpus

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = {f.class_name: f for f in sc.supported_families()}
EXPECTED = ("config/autoresearch.json", "corpus/checksums.json", "model_under_test/__init__.py",
            "model_under_test/pipeline.py", "program.md", "AGENTS.md", ".gitignore")


def fake_pipeline(folder: Path, class_name: str, **configs: dict) -> Path:
    """A folder with a model_index.json naming `class_name` and optional component configs (no weights)."""
    folder.mkdir(parents=True)
    (folder / "model_index.json").write_text(json.dumps({"_class_name": class_name, "_diffusers_version": "0.42.1"}))
    for component, config in configs.items():
        (folder / component).mkdir()
        (folder / component / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git.Repo.init(tmp_path / "repo")
    return tmp_path / "repo"


def run_scaffold(repo: Path, pipeline: Path, **flags) -> list[str]:
    lines: list[str] = []
    sc.scaffold(sc.Request(pipeline=pipeline, **flags), cwd=repo, out=lines.append)
    return lines


def test_the_families_named_in_the_issue_are_supported_with_this_diffusers():
    assert {"DiTPipeline", "PixArtAlphaPipeline", "PixArtSigmaPipeline", "StableDiffusion3Pipeline", "SanaPipeline",
            "FluxPipeline"} <= set(FAMILIES)


@pytest.mark.parametrize("class_name", sorted(FAMILIES))
def test_scaffold_writes_a_loadable_project_for_each_family(repo, tmp_path, class_name):
    family = FAMILIES[class_name]
    lines = run_scaffold(repo, fake_pipeline(tmp_path / "pipe", class_name), device="cpu")
    lane = f"{family.key}-{family.sample_size * family.vae_factor}"
    for rel in (*EXPECTED, f"corpus/{lane}.jsonl"):
        assert (repo / rel).is_file(), rel
        assert f"wrote {rel}" in "\n".join(lines)
    config = load_config(repo / "config" / "autoresearch.json")
    node = config.lanes[lane]
    steps, guidance, _ = sc.call_defaults(family)
    assert (config.default_lane, node.preset, node.device, node.steps, node.guidance, node.batch) == \
        (lane, family.key, "cpu", steps, guidance, 1)
    assert node.weights == str((tmp_path / "pipe").resolve())  # outside the repository: absolute
    assert config.mutable_paths == ("model_under_test/",)
    assert {"config/", "corpus/", "program.md", "AGENTS.md", "tests/"} <= set(config.fixed_paths)
    assert config.target.is_cpu and config.target.name == cpu_name()  # a CPU lane's target is its own CPU
    assert "A5500" not in (repo / "program.md").read_text() and cpu_name() in (repo / "program.md").read_text()
    cases = load_corpus(repo / node.corpus)  # the checksum the harness verifies
    assert len(cases) == sc.DEFAULT_CASES and len({c.seed for c in cases}) == len(cases)
    if family.text_to_image:
        assert all(len(c.prompt.split()) > 3 and c.label is None for c in cases)
    else:
        assert all(c.prompt == f"class {c.label}" and 0 <= c.label < 1000 for c in cases)
    init = (repo / "model_under_test" / "__init__.py").read_text()
    pipeline = (repo / "model_under_test" / "pipeline.py").read_text()
    compile(init, "model_under_test/__init__.py", "exec")
    compile(pipeline, "model_under_test/pipeline.py", "exec")
    assert f'PIPELINE_CLASS = "{class_name}"' in init and f"class {family.wrapper}" in pipeline
    assert "def build_pipeline(spec" in init and "def generate(self" in pipeline
    program = (repo / "program.md").read_text()
    assert lane in program and "model_under_test/" in program and "dit-ar experiment" in program
    assert "program.md" in (repo / "AGENTS.md").read_text()


def test_workload_comes_from_the_folder_then_the_flags(repo, tmp_path):
    pipe = fake_pipeline(tmp_path / "pipe", "PixArtSigmaPipeline", transformer={"sample_size": 64},
                         vae={"block_out_channels": [8, 8, 8, 8]})
    run_scaffold(repo, pipe)
    config = load_config(repo / "config" / "autoresearch.json")
    lane = config.lanes["pixart-sigma-512"]
    assert (lane.resolution, lane.device, lane.performance.warmup_rounds) == (512, "cuda", 3)  # the GPU lanes'
    assert config.target.name == "NVIDIA RTX A5500" and not config.target.is_cpu  # a GPU lane: the project's card
    run_scaffold(repo, pipe, lane="mine", resolution=384, steps=7, guidance=2.5, batch=3, cases=5, force=True)
    lane = load_config(repo / "config" / "autoresearch.json").lanes["mine"]
    assert (lane.resolution, lane.steps, lane.guidance, lane.batch) == (384, 7, 2.5, 3)
    assert len(load_corpus(repo / lane.corpus)) == 5
    sums = json.loads((repo / "corpus" / "checksums.json").read_text())
    assert set(sums) == {"pixart-sigma-512.jsonl", "mine.jsonl"}  # the other lane's checksum is kept


def test_sana_resolution_uses_the_dc_autoencoder(repo, tmp_path):
    pipe = fake_pipeline(tmp_path / "pipe", "SanaPipeline", transformer={"sample_size": 16},
                         vae={"encoder_block_out_channels": [8, 8, 8, 8, 8, 8]})
    run_scaffold(repo, pipe)
    assert load_config(repo / "config" / "autoresearch.json").lanes["sana-512"].resolution == 512


def test_dit_classes_stay_within_the_transformer_table(repo, tmp_path):
    pipe = fake_pipeline(tmp_path / "pipe", "DiTPipeline", transformer={"sample_size": 4, "num_embeds_ada_norm": 10})
    run_scaffold(repo, pipe, cases=4)
    cases = load_corpus(repo / "corpus" / "dit-32.jsonl")
    assert [c.label for c in cases] == [0, 2, 5, 7]


def test_weights_inside_the_repository_are_relative_and_fixed(repo):
    run_scaffold(repo, fake_pipeline(repo / "weights" / "pipe", "DiTPipeline"), device="cpu")
    config = load_config(repo / "config" / "autoresearch.json")
    assert config.lanes["dit-256"].weights == "weights/pipe"
    assert "weights/pipe/" in config.fixed_paths


def test_gitignore_is_extended_not_replaced(repo, tmp_path):
    (repo / ".gitignore").write_text("data/")
    run_scaffold(repo, fake_pipeline(tmp_path / "pipe", "DiTPipeline"))
    lines = (repo / ".gitignore").read_text().splitlines()
    assert lines[0] == "data/" and "__pycache__/" in lines and "*.pyc" in lines


def test_unsupported_class_is_refused_with_the_supported_list(repo, tmp_path):
    with pytest.raises(Refused) as err:
        run_scaffold(repo, fake_pipeline(tmp_path / "pipe", "StableDiffusionXLPipeline"))
    message = str(err.value)
    assert "StableDiffusionXLPipeline" in message and "not supported" in message
    assert all(name in message for name in FAMILIES)
    assert not (repo / "config").exists()


def test_existing_files_are_refused_without_force(repo, tmp_path):
    pipe = fake_pipeline(tmp_path / "pipe", "DiTPipeline")
    (repo / "program.md").write_text("mine\n")
    (repo / "model_under_test").mkdir()
    (repo / "model_under_test" / "__init__.py").write_text("# mine\n")
    with pytest.raises(Refused) as err:
        run_scaffold(repo, pipe)
    assert "model_under_test/__init__.py" in str(err.value) and "program.md" in str(err.value)
    assert "--force" in str(err.value)
    assert (repo / "program.md").read_text() == "mine\n" and not (repo / "config").exists()
    run_scaffold(repo, pipe, force=True)
    assert (repo / "program.md").read_text() != "mine\n"


def test_outside_a_git_repository_is_refused(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(Refused, match="not inside a git repository.*git init"):
        run_scaffold(tmp_path / "plain", fake_pipeline(tmp_path / "pipe", "DiTPipeline"))


def test_a_folder_without_model_index_is_refused(repo, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(Refused, match="no model_index.json.*save_pretrained"):
        run_scaffold(repo, tmp_path / "empty")
    with pytest.raises(Refused, match="no such folder"):
        run_scaffold(repo, tmp_path / "missing")


@pytest.mark.parametrize("flags,message", [({"resolution": 100}, "multiple of 16"), ({"lane": "My Lane"}, "--lane"),
                                           ({"device": "tpu"}, "--device"), ({"steps": 0}, "--steps"),
                                           ({"resolution": -16}, "--resolution")])
def test_bad_flags_are_refused(repo, tmp_path, flags, message):
    with pytest.raises(Refused, match=message):
        run_scaffold(repo, fake_pipeline(tmp_path / "pipe", "DiTPipeline"), **flags)


def test_contract_matches_this_repositorys_config():
    """The scaffold copies this project's contract; lab/tools/sync_scaffold_contract.py refreshes it."""
    config = json.loads((ROOT / "config" / "autoresearch.json").read_text())
    shipped = scaffold_files.contract()
    stale = [key for key in ("target", "quality", "performance") if shipped[key] != config[key]]
    lane = config["lanes"]["dit-xl2-256"]
    if shipped["cuda_lane"] != {"guardrails": lane["guardrails"], "performance": lane.get("performance", {})}:
        stale.append("cuda_lane")
    assert not stale, f"contract.json is stale in {stale}: run python -m lab.tools.sync_scaffold_contract"


def test_the_verb_parses():
    args = build_parser().parse_args(["scaffold", "--pipeline", "p", "--device", "cpu", "--steps", "4", "--force"])
    assert (args.verb, args.pipeline, args.device, args.steps, args.force) == ("scaffold", Path("p"), "cpu", 4, True)


# -- where the suites are ------------------------------------------------------------------------------------
@pytest.mark.parametrize("expr,wanted", [("quality", True), ("perf", True), ("quality or perf", True),
                                         ("quality and not slow", True), ("not perf", False), ("slow", False),
                                         ("", False), ("quality or", False)])
def test_which_marker_expressions_ask_for_the_suites(expr, wanted):
    assert selects_suites(expr) is wanted


def test_in_this_repository_the_suites_are_under_the_root(tmp_path):
    suites = suite_files()
    assert suites.folders == (ROOT / "quality_suite", ROOT / "perf_suite")
    assert ROOT / "quality_suite" / "test_quality.py" in suites.tests
    assert suites.outside(ROOT) == () and suites.outside(tmp_path) == suites.folders
    assert suites.contains(ROOT / "perf_suite" / "test_perf.py") and not suites.contains(ROOT / "tests")
    args = experiment_pytest_args(ROOT / "config" / "autoresearch.json", "exact", "d", None)
    assert args[-1] == str(ROOT)  # nothing added: the root holds the suites
