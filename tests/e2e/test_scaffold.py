"""Bring your own DiT, end to end: the wheel installed into a fresh virtual environment, a tiny diffusers
pipeline saved into a fresh git repository, then the own-model guide's commands there (`dit-ar scaffold`, `init`,
`baseline`, a null experiment that is discarded, an exact speedup that is kept, `pytest -m quality`).
And the model code the scaffold writes, run on a tiny pipeline of every supported family.

The wheel is built as the guide says (`python -m build`), or taken from $DIT_AR_WHEEL (CI builds it once).
The new environment sees the test environment's packages (torch, diffusers, ...) through a .pth file, but not
this checkout: pytest_dit_ar must import from the wheel. The lane is a CPU lane with a fast timing protocol;
the injected, exactly removable cost is the sleep wrapper the harness study uses.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import git as gitpython
import pytest

from pytest_dit_ar.cli import scaffold as sc
from pytest_dit_ar.loop.speed.patching import SLEEP_WRAPPER
from tests.helpers.loop import DELAY_LINE, FAST_PERF
from tests.helpers.tiny_pipelines import BUILDERS, RESOLUTION, save_tiny
from tests.helpers.venv import Venv, build_wheel, make_venv

PROJECT = Path(__file__).resolve().parents[2]
GUIDE = PROJECT / "docs" / "guide" / "your-own-model.md"
GUIDE_SECTION = "## From a diffusers pipeline"
FAST = {**FAST_PERF, "rounds": 6, "max_segments": 2}  # one decision after two fresh worker pairs


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """The wheel in a fresh venv that sees the test environment's packages (not this checkout's editable install)."""
    base = tmp_path_factory.mktemp("byo")
    return make_venv(base / "venv", str(build_wheel(base / "dist")))


def commit_all(repo: Path, message: str) -> str:
    r = gitpython.Repo(repo)
    r.git.add("-A")
    r.git.commit("-qm", message)
    return r.head.commit.hexsha


def guide_commands() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    return text.split(GUIDE_SECTION, 1)[1].split("\n## ", 1)[0]


@pytest.mark.extended  # CI's 15-minute budget (design note 42); the full end-to-end tier runs it
@pytest.mark.slow
def test_bring_your_own_dit(venv: Venv, tmp_path: Path) -> None:
    where = venv.run(tmp_path, str(venv.python), "-c", "import pytest_dit_ar, quality_suite; "
                     "print(pytest_dit_ar.__file__); print(quality_suite.__file__)")
    assert all(line.startswith(str(venv.site)) for line in where.stdout.split()), where.stdout + where.stderr
    repo = tmp_path / "my-dit"
    gitpython.Repo.init(repo).git.config("user.email", "tests@example.invalid")
    gitpython.Repo(repo).git.config("user.name", "dit-ar tests")
    save_tiny("DiTPipeline", repo / "weights" / "tiny-dit")
    commit_all(repo, "a tiny DiT")

    # the guide's commands, with a CPU lane and a small corpus
    guide = guide_commands()
    for verb in ("dit-ar scaffold --pipeline", "dit-ar init", "dit-ar baseline", "dit-ar experiment"):
        assert verb in guide, f"{GUIDE.name} section {GUIDE_SECTION!r} lost {verb!r}"
    venv.dit_ar(repo, "scaffold", "--pipeline", "weights/tiny-dit", "--device", "cpu", "--steps", "4", "--cases", "4")
    assert "dit-32" in (repo / "AGENTS.md").read_text()
    config_path = repo / "config" / "autoresearch.json"
    config = json.loads(config_path.read_text())
    config["lanes"]["dit-32"]["performance"] = FAST
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    init = repo / "model_under_test" / "__init__.py"
    init.write_text(init.read_text() + SLEEP_WRAPPER.format(delay=0.15))
    commit_all(repo, "Set up dit-ar")

    assert "lanes that can run here: dit-32" in venv.dit_ar(repo, "doctor").stdout
    assert "handbook/" in venv.dit_ar(repo, "search", "cuda graphs", "--top", "1").stdout  # the packaged copy
    venv.dit_ar(repo, "init", "--tag", "first")
    venv.dit_ar(repo, "baseline", "--quiet")

    parent = gitpython.Repo(repo).head.commit.hexsha
    with (repo / "model_under_test" / "pipeline.py").open("a") as f:
        f.write("\n# a comment: the same program\n")
    commit_all(repo, "a comment")
    null = venv.dit_ar(repo, "experiment", "--classification", "exact", "--description", "a comment", expect=1)
    assert null.stdout.rstrip().splitlines()[-1] == "VERDICT: DISCARD-PERFORMANCE", null.stdout[-3000:]
    # the installed suites ran (progress lines may sit between a module's name and its dots): quality passed,
    # the timing test failed
    assert "test_quality.py" in null.stdout and "test_perf.py" in null.stdout, null.stdout[-3000:]
    assert re.search(r"=+ 1 failed, \d+ passed", null.stdout), null.stdout[-3000:]
    assert gitpython.Repo(repo).head.commit.hexsha == parent

    lines = [f"{DELAY_LINE}0.0" if line.startswith(DELAY_LINE) else line for line in init.read_text().splitlines()]
    init.write_text("\n".join(lines) + "\n")
    kept = commit_all(repo, "drop the sleep before generate")
    fast = venv.dit_ar(repo, "experiment", "--classification", "exact", "--description", "drop the sleep")
    assert fast.stdout.rstrip().splitlines()[-1] == "VERDICT: KEEP", fast.stdout[-3000:]
    assert gitpython.Repo(repo).head.commit.hexsha == kept

    plain = venv.run(repo, str(venv.python), "-m", "pytest", "-m", "quality", "-q", "-p", "no:cacheprovider")
    assert plain.returncode == 0 and " passed" in plain.stdout, plain.stdout[-3000:] + plain.stderr[-2000:]
    listed = venv.run(repo, str(venv.python), "-m", "pytest", "-m", "quality", "-q", "--collect-only",
                      "-p", "no:cacheprovider")
    one = next(line for line in listed.stdout.splitlines() if "test_case_against_baseline[" in line)
    again = venv.run(repo, str(venv.python), "-m", "pytest", one.strip(), "-q", "-p", "no:cacheprovider")
    assert again.returncode == 0 and "1 passed" in again.stdout, (one, again.stdout[-2000:])  # pasted as printed
    assert gitpython.Repo(repo).git.status("--porcelain") == ""


def _import_generated(repo: Path):
    """The generated model_under_test, imported by file location (as the worker does)."""
    for name in [m for m in sys.modules if m == "model_under_test" or m.startswith("model_under_test.")]:
        del sys.modules[name]
    package = repo / "model_under_test"
    spec = importlib.util.spec_from_file_location("model_under_test", package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["model_under_test"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("class_name", sorted(set(BUILDERS) - {"DiTPipeline"}))
def test_generated_model_runs_on_a_tiny_pipeline(tmp_path: Path, class_name: str) -> None:
    """The text-to-image families' generated code (the DiT one runs in the test above), on the CPU."""
    from dit_ar_contract.config import load_config

    gitpython.Repo.init(tmp_path)
    save_tiny(class_name, tmp_path / "weights" / "tiny")
    request = sc.Request(pipeline=tmp_path / "weights" / "tiny", device="cpu", steps=2, cases=2, resolution=RESOLUTION)
    sc.scaffold(request, cwd=tmp_path, out=lambda line: None)
    spec = load_config(tmp_path / "config" / "autoresearch.json").lane().workload(tmp_path)
    try:
        pipe = _import_generated(tmp_path).build_pipeline(spec)
        pair = pipe.generate([("a red lighthouse at night", 11), ("the cat in the forest", 12)])
        alone = pipe.generate([("the cat in the forest", 12)])
    finally:
        sys.modules.pop("model_under_test", None)
    assert pair.images.shape == (2, 3, RESOLUTION, RESOLUTION) and pair.latents.ndim == 4
    assert 0.0 <= float(pair.images.min()) and float(pair.images.max()) <= 1.0
    assert float((alone.latents[0] - pair.latents[1]).abs().max()) < 1e-3  # a request's output is its own
    assert "transformer" in pipe.components and "text_encoder" in pipe.components
