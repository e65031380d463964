"""What the light entry points import: `dit-ar --version`, `dit-ar search` and loading the pytest plugin (every
pytest run in the environment, IDE collection included) must not import torch or the metric stack.

In-process: the project's own modules are taken out of sys.modules for the test (and put back after), and every
`import` statement is recorded through builtins.__import__, which runs even for a module already imported."""

from __future__ import annotations

import builtins
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
OURS = ("pytest_dit_ar", "quality_suite", "perf_suite", "dit_ar_contract", "model_under_test")
HEAVY = {"torch", "torchvision", "torchmetrics", "scipy", "diffusers", "transformers", "open_clip", "matplotlib"}


@pytest.fixture
def imported(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] in OURS}
    for name in saved:
        del sys.modules[name]
    seen: set[str] = set()
    real = builtins.__import__

    def recording(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002, ANN001 - its signature
        if level == 0:
            seen.add(name.split(".")[0])
        return real(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", recording)
    try:
        yield seen
    finally:
        monkeypatch.setattr(builtins, "__import__", real)
        for name in [k for k in sys.modules if k.split(".")[0] in OURS]:
            del sys.modules[name]
        sys.modules.update(saved)


def test_loading_the_plugin_imports_no_torch(imported: set[str]) -> None:
    import pytest_dit_ar.plugin  # noqa: F401 - the pytest11 entry point
    import pytest_dit_ar.plugin.session  # noqa: F401 - what pytest_configure builds
    from pytest_dit_ar.loop.guards.outcomes import TestOutcomes  # noqa: F401 - held from the start of every run

    assert "pytest_dit_ar" in imported and not imported & HEAVY, sorted(imported & HEAVY)


def test_version_imports_no_torch(imported: set[str], capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(PROJECT)
    from pytest_dit_ar.cli.main import main

    assert main(["--version"]) == 0 and "dit-ar" in capsys.readouterr().out
    assert not imported & HEAVY, sorted(imported & HEAVY)
    # answered before the verbs' modules and the config are imported (the <= 0.5 s of issue 20)
    assert not {"pytest_dit_ar.cli.search", "pytest_dit_ar.cli.summary", "dit_ar_contract.config"} & imported
    with pytest.raises(SystemExit) as exit_:  # elsewhere on the line argparse still answers it
        main(["--config", "x.json", "--version"])
    assert exit_.value.code == 0 and "dit-ar" in capsys.readouterr().out


def test_search_imports_no_torch(imported: set[str], capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the one-page index stays out of ~/.cache
    (tmp_path / "handbook").mkdir()  # a one-page handbook: the same code path as the project's, in milliseconds
    (tmp_path / "handbook" / "graphs.md").write_text("# CUDA graphs\n\nCapture the denoiser once, replay it.\n")
    from pytest_dit_ar.cli.main import main

    assert main(["--config", str(tmp_path / "config" / "autoresearch.json"), "search", "cuda graphs"]) == 0
    assert "handbook/graphs.md" in capsys.readouterr().out
    assert not imported & HEAVY, sorted(imported & HEAVY)


def test_doctor_reads_the_stack_without_importing_torch(imported: set[str]) -> None:
    from dit_ar_contract import versions

    cuda = versions.torch_cuda_from_files()  # what collect(import_torch=False) records as torch_cuda
    version = versions.package_version("torch")
    assert version and not imported & HEAVY, sorted(imported & HEAVY)
    assert cuda is None or f"cu{cuda.replace('.', '')}" in version or "+" not in version  # 13.0 <-> 2.14.1+cu130


def test_the_task_metric_checks_doctor_runs_import_no_torch(imported: set[str]) -> None:
    from dit_ar_contract.config import load_config
    from quality_suite import task_metrics

    config = load_config(PROJECT / "config" / "autoresearch.json")
    for lane in config.lanes.values():
        for name in task_metrics.REGISTRY:
            task_metrics.problem(name, lane.quality, config.root)
    assert not imported & HEAVY, sorted(imported & HEAVY)


def test_the_experiment_starts_without_importing_torchmetrics(imported: set[str]) -> None:
    """`dit-ar experiment` imports the loop before its workers start; torchmetrics (about 4 s here) is imported
    beside the quality run (`quality_suite.metrics.prefetch`), and on first use it is there. (The recording hook
    sees every import statement, cached module or not: the test holds whether another test imported it first.)"""
    import pytest_dit_ar.loop.experiment  # noqa: F401 - what the plugin imports when an experiment begins

    assert "torchmetrics" not in imported
    from quality_suite import metrics

    metrics.prefetch().join(timeout=120)
    assert "torchmetrics" in imported
    img = __import__("torch").rand(3, 16, 16)
    assert metrics.fidelity(img, img, img[:1], img[:1])["psnr_db"] == float("inf")


def test_the_console_entry_runs_main_then_freezes_the_heap_for_a_quick_exit(monkeypatch) -> None:
    import gc

    from pytest_dit_ar.cli import main as cli

    calls: list[str] = []
    monkeypatch.setattr(cli, "main", lambda: calls.append("main") or 3)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    assert cli.entry() == 3
    assert calls == ["main", "freeze"]
