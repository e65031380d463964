"""Quality gates per class and the classification audit: fast unit tests, then a few whole experiments.

Unit tests feed synthetic measurements to quality_suite.gates / quality_suite.audit. The slow tests
(marked ``slow``) run real candidates of the embedded CPU lane through `dit-ar experiment` and read
the run's quality.json, the ledger and the verdict line.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from loop_helpers import (commit_change, env_for, experiment, git, last_line, ledger_rows, make_project_copy, run,
                          set_slow, wrap_generate)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pytest_dit_ar.config import load_config  # noqa: E402
from pytest_dit_ar.errors import Refused  # noqa: E402
from quality_suite import audit, gates  # noqa: E402

QUALITY = load_config(ROOT / "config" / "autoresearch.json").lane("embedded-cpu").quality
ENVELOPE = {"latent_rel_l2": 1e-6, "latent_max_abs": 1e-5, "psnr_db": 90.0, "ssim": 1.0}
LOWER = {"frechet_distance"}


def fid(rel: float = 0.0, mx: float = 0.0, psnr: float = math.inf, ssim: float = 1.0, **extra: float) -> dict:
    return {"latent_rel_l2": rel, "latent_max_abs": mx, "psnr_db": psnr, "ssim": ssim, **extra}


def failed(checks: list[gates.Check]) -> list[str]:
    return [c.name for c in checks if not c.passed]


# -- gates: exact ------------------------------------------------------------------------------

def test_exact_passes_inside_the_envelope_and_names_what_leaves_it() -> None:
    inside = gates.case_checks("exact", "c1", fid(2e-6, 2e-5, 85.0, 0.99995), QUALITY, ENVELOPE)
    assert failed(inside) == []
    outside = gates.case_checks("exact", "c1", fid(1e-3, 2e-5, 85.0, 0.99995), QUALITY, ENVELOPE)
    assert failed(outside) == ["latent_rel_l2"]
    text = next(c for c in outside if not c.passed).describe()
    assert text.startswith("latent_rel_l2 case c1: 0.001 (needs <= 1e-05)") and "envelope" in text


def test_exact_limits_use_multiple_floors_and_never_exceed_the_numerical_gate() -> None:
    lim = gates.exact_limits(ENVELOPE, QUALITY)
    assert lim["latent_rel_l2"] == pytest.approx(1e-5)  # 4 x 1e-6 is below the floor
    assert lim["psnr_db"] == pytest.approx(60.0)  # the floor, since 4 x the envelope's error is tighter
    wide = gates.exact_limits({"latent_rel_l2": 0.5, "latent_max_abs": 1.0, "psnr_db": 10.0, "ssim": 0.5}, QUALITY)
    num = QUALITY["numerical"]
    assert wide["latent_rel_l2"] == num["max_latent_rel_l2"] and wide["psnr_db"] == num["min_psnr_db"]
    assert wide["ssim"] == num["min_ssim"]


# -- gates: numerical / approximate / quantization --------------------------------------------

def test_numerical_floors_worst_case_and_mean() -> None:
    ok_case = gates.case_checks("numerical", "c1", fid(0.01, 0.1, 35.0, 0.995), QUALITY, ENVELOPE)
    assert failed(ok_case) == []
    bad_case = gates.case_checks("numerical", "c2", fid(0.01, 0.1, 25.0, 0.995), QUALITY, ENVELOPE)
    assert failed(bad_case) == ["psnr_db"]
    summary = {"psnr_db": {"mean": 35.0}, "ssim": {"mean": 0.995}}
    agg = gates.aggregate_checks("numerical", summary, QUALITY, {}, {}, LOWER)
    assert failed(agg) == ["mean_psnr_db"]  # every case >= 30 dB, but the mean needs 38 dB


def test_lpips_is_gated_only_where_it_was_measured() -> None:
    assert "lpips" not in [c.name for c in gates.case_checks("numerical", "c", fid(psnr=50), QUALITY, ENVELOPE)]
    measured = gates.case_checks("numerical", "c", fid(psnr=50, lpips=0.2), QUALITY, ENVELOPE)
    assert failed(measured) == ["lpips"]


def test_approximate_is_non_inferiority_within_the_margin() -> None:
    base = {"judge_accuracy": 0.95, "frechet_distance": 10.0}
    close = {"judge_accuracy": 0.93, "frechet_distance": 11.4}  # margins 0.025 absolute, 15 % relative
    assert failed(gates.aggregate_checks("approximate", {}, QUALITY, close, base, LOWER)) == []
    worse = {"judge_accuracy": 0.90, "frechet_distance": 12.0}
    agg = gates.aggregate_checks("approximate", {}, QUALITY, worse, base, LOWER)
    assert failed(agg) == ["frechet_distance", "judge_accuracy"]
    assert "judge_accuracy: 0.9 (needs >= 0.925)" in [c.describe() for c in agg][1]
    assert failed(gates.case_checks("approximate", "c", fid(0.3, 1.0, 20.0, 0.8), QUALITY, ENVELOPE)) == []
    none = gates.aggregate_checks("approximate", {}, QUALITY, {}, {}, LOWER)
    assert failed(none) == ["task_metrics"]  # nothing to show non-inferiority with


def test_quantization_is_zero_regression_plus_numerical_floors() -> None:
    base = {"judge_accuracy": 0.95, "frechet_distance": 10.0}
    summary = {"psnr_db": {"mean": 45.0}, "ssim": {"mean": 0.999}}
    same = gates.aggregate_checks("quantization", summary, QUALITY, dict(base), base, LOWER)
    assert failed(same) == [] and {"mean_psnr_db", "judge_accuracy", "frechet_distance"} <= {c.name for c in same}
    tiny = {"judge_accuracy": 0.95, "frechet_distance": 10.001}
    assert failed(gates.aggregate_checks("quantization", summary, QUALITY, tiny, base, LOWER)) == ["frechet_distance"]
    lost = gates.case_checks("quantization", "c7", fid(0.01, 0.1, 40.0, 0.99), QUALITY, ENVELOPE,
                             base_pass=True, cand_pass=False)
    assert failed(lost) == ["task_case_pass"]
    assert failed(gates.case_checks("quantization", "c8", fid(0.01, 0.1, 40.0, 0.99), QUALITY, ENVELOPE,
                                    base_pass=False, cand_pass=False)) == []
    assert failed(gates.case_checks("quantization", "c9", fid(0.2, 0.1, 40.0, 0.99), QUALITY, ENVELOPE)) == \
        ["latent_rel_l2"]


def test_missing_thresholds_are_named() -> None:
    broken = copy.deepcopy(QUALITY)
    del broken["numerical"]["min_mean_ssim"]
    assert gates.missing_thresholds(broken) == ["quality.numerical.min_mean_ssim"]
    assert gates.missing_thresholds(QUALITY) == []


# -- audit ---------------------------------------------------------------------------------

class Pipe:
    def __init__(self, transformer: torch.nn.Module):
        self.components = {"transformer": transformer}


@pytest.fixture(scope="module")
def dit() -> torch.nn.Module:
    from model_under_test.embedded import make_transformer

    return make_transformer().eval()


def side(module: torch.nn.Module, acts: tuple[str, ...] = ("float32",), rows: float = 40.0) -> dict:
    return {"audit": audit.inspect_pipeline(Pipe(module)), "activation_dtypes": list(acts),
            "denoiser_rows_per_image": rows}


def test_audit_keeps_an_exact_reordering_exact(dit: torch.nn.Module) -> None:
    # batching CFG into one forward keeps 2 rows per image and step: same evidence as the baseline
    assert audit.effective_class("exact", side(copy.deepcopy(dit)), side(dit)) == ("exact", [])


def test_audit_raises_a_bf16_cast_to_numerical(dit: torch.nn.Module) -> None:
    cls, reasons = audit.effective_class("exact", side(copy.deepcopy(dit).to(torch.bfloat16), ("bfloat16",)), side(dit))
    assert cls == "numerical" and "bfloat16" in reasons[0]  # half the bytes is not quantization
    autocast = side(copy.deepcopy(dit), ("bfloat16", "float32"))  # weights fp32, activations bf16
    assert audit.effective_class("exact", autocast, side(dit))[0] == "numerical"
    bf = copy.deepcopy(dit).to(torch.bfloat16)
    assert audit.effective_class("exact", side(bf, ("bfloat16",)), side(bf, ("bfloat16",)))[0] == "exact"


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")  # torch.ao is deprecated
def test_audit_raises_dynamic_int8_to_quantization(dit: torch.nn.Module) -> None:
    q = torch.ao.quantization.quantize_dynamic(copy.deepcopy(dit), {torch.nn.Linear}, dtype=torch.qint8)
    cls, reasons = audit.effective_class("exact", side(q), side(dit))
    assert cls == "quantization"
    assert any("torch.ao.nn.quantized" in r for r in reasons) and any("packed" in r for r in reasons)
    assert audit.effective_class("approximate", side(q), side(dit))[0] == "quantization"


def test_audit_raises_fewer_denoiser_rows_to_approximate(dit: torch.nn.Module) -> None:
    cls, reasons = audit.effective_class("numerical", side(dit, rows=20.0), side(dit, rows=40.0))
    assert cls == "approximate" and "from 40 to 20" in reasons[0]
    assert audit.effective_class("quantization", side(dit, rows=20.0), side(dit))[0] == "quantization"


# == whole experiments on the embedded CPU lane (slow) =============================================

WRAP = '''

_build_{tag} = build_pipeline


def build_pipeline(spec):
{body}
'''


def wrap(tag: str, body: str) -> str:
    """Source appended to model_under_test/__init__.py: a new build_pipeline around the previous one."""
    return WRAP.format(tag=tag, body="\n".join("    " + line for line in body.strip().splitlines()))


def run_record(repo: Path) -> tuple[list[str], dict]:
    """The last ledger row and its run's quality.json."""
    row = ledger_rows(repo)[-1]
    return row, json.loads((repo / row[16] / "quality.json").read_text())


def judged(repo: Path, cls: str, desc: str) -> tuple[subprocess.CompletedProcess, list[str], dict]:
    proc = experiment(repo, cls, desc)
    assert last_line(proc).startswith("VERDICT:"), proc.stdout + proc.stderr
    row, quality = run_record(repo)
    return proc, row, quality


def consistent_verdict(row: list[str], quality: dict) -> None:
    """DISCARD-QUALITY exactly when a quality check failed; otherwise performance decided."""
    if quality["failures"]:
        assert row[5] == "discard-quality" and quality["failures"][0] in row[14]
    else:
        assert row[5] in ("keep", "discard-performance")


@pytest.mark.slow
def test_batched_cfg_is_an_exact_reordering_that_passes(loop_repo: Path) -> None:
    pipeline = loop_repo / "model_under_test" / "pipeline.py"
    text = pipeline.read_text()
    two_passes = ("                    eps_cond = self.predict_noise(model_input, t, labels)\n"
                  "                    eps_uncond = self.predict_noise(model_input, t, null)\n")
    one_pass = ("                    both = self.predict_noise(torch.cat([model_input, model_input]), t,\n"
                "                                              torch.cat([labels, null]))\n"
                "                    eps_cond, eps_uncond = both.chunk(2)\n")
    assert two_passes in text
    commit_change(loop_repo, "model_under_test/pipeline.py", text.replace(two_passes, one_pass),
                  "batch CFG into one forward", append=False)
    proc, row, quality = judged(loop_repo, "exact", "batch CFG into one forward")
    assert row[7] == "exact" and quality["audit_reasons"] == []
    assert quality["failures"] == [], proc.stdout
    consistent_verdict(row, quality)
    run_dir = loop_repo / row[16]
    assert (run_dir / "worst_cases.png").is_file() and len(list((run_dir / "cases").glob("*.png"))) == 40
    assert quality["lpips"].startswith(("unavailable", "computed"))


@pytest.mark.slow
def test_bf16_declared_exact_is_judged_as_numerical(loop_repo: Path) -> None:
    commit_change(loop_repo, "model_under_test/__init__.py", wrap("bf16", """
import torch
pipe = _build_bf16(spec)
pipe.transformer.to(torch.bfloat16)
return pipe"""), "bf16 transformer")
    proc, row, quality = judged(loop_repo, "exact", "bf16 transformer")
    assert row[6] == "exact" and row[7] == "numerical"
    assert any("bfloat16" in r for r in quality["audit_reasons"])
    assert {c["name"] for c in quality["aggregate"]} == {"mean_psnr_db", "mean_ssim"}  # the numerical gate
    assert "class: declared exact, effective numerical" in proc.stdout
    consistent_verdict(row, quality)


@pytest.mark.slow
def test_int8_dynamic_quantization_needs_zero_regression(loop_repo: Path) -> None:
    commit_change(loop_repo, "model_under_test/__init__.py", wrap("int8", """
import torch
pipe = _build_int8(spec)
pipe.transformer = torch.ao.quantization.quantize_dynamic(pipe.transformer, {torch.nn.Linear}, dtype=torch.qint8)
return pipe"""), "int8 dynamic quantization")
    proc, row, quality = judged(loop_repo, "exact", "int8 dynamic quantization")
    assert row[7] == "quantization", quality["audit_reasons"]
    cand, base = quality["task_candidate"], quality["task_baseline"]
    regressed = [n for n in base if (cand[n] > base[n] if n == "frechet_distance" else cand[n] < base[n])]
    lost = [cid for cid, v in quality["per_case"].items()
            if any(c["name"] == "task_case_pass" and not c["passed"] for c in v["checks"])]
    print(f"\nint8: task {cand} vs baseline {base}; regressed {regressed}; lost cases {lost}; verdict {row[5]}")
    failing = {f.split(":")[0].split(" case ")[0] for f in quality["failures"]}
    assert set(regressed) <= failing and bool(lost) == ("task_case_pass" in failing)
    if regressed or lost:
        assert row[5] == "discard-quality" and last_line(proc) == "VERDICT: DISCARD-QUALITY"
    consistent_verdict(row, quality)


@pytest.mark.slow
def test_fewer_steps_are_audited_as_approximate(loop_repo: Path) -> None:
    commit_change(loop_repo, "model_under_test/__init__.py", wrap("steps", """
return _build_steps(dict(spec, steps=spec["steps"] // 2))"""), "half the sampling steps")
    proc, row, quality = judged(loop_repo, "exact", "half the sampling steps")
    assert row[7] == "approximate"
    steps = json.loads((loop_repo / "config/autoresearch.json").read_text())["lanes"]["embedded-cpu"]["steps"]
    rows = 2 * steps  # two classifier-free guidance passes per step in the baseline
    assert any(f"denoiser evaluations per image fell from {rows} to {rows // 2}" in r for r in quality["audit_reasons"])
    assert {c["name"] for c in quality["aggregate"]} == {"judge_accuracy", "frechet_distance"}
    consistent_verdict(row, quality)


@pytest.mark.slow
def test_nan_output_is_a_crash(loop_repo: Path) -> None:
    parent = git(loop_repo, "rev-parse", "HEAD")
    commit_change(loop_repo, "model_under_test/__init__.py", wrap_generate("nan", """\
        out = _gen(requests)
        out.latents = out.latents * float("nan")
        return out"""), "NaN latents")
    proc = experiment(loop_repo, "exact", "NaN latents")
    assert last_line(proc) == "VERDICT: CRASH" and proc.returncode == 1, proc.stdout + proc.stderr
    assert ledger_rows(loop_repo)[-1][5] == "crash" and git(loop_repo, "rev-parse", "HEAD") == parent


@pytest.mark.slow
def test_added_noise_is_a_quality_discard_naming_the_metric(loop_repo: Path) -> None:
    parent = git(loop_repo, "rev-parse", "HEAD")
    commit_change(loop_repo, "model_under_test/__init__.py", wrap_generate("noise", """\
        out = _gen(requests)
        gen = torch.Generator().manual_seed(0)
        out.images = (out.images + 0.05 * torch.randn(out.images.shape, generator=gen)).clamp(0, 1)
        return out""", "    import torch\n"), "noisy images")
    proc, row, quality = judged(loop_repo, "exact", "noisy images")
    assert last_line(proc) == "VERDICT: DISCARD-QUALITY" and proc.returncode == 1
    assert git(loop_repo, "rev-parse", "HEAD") == parent
    first = quality["failures"][0]
    assert first.startswith("psnr_db case ") and "(needs >= " in first
    assert first in proc.stdout and first in row[14]  # terminal summary and ledger name metric, case, threshold


# -- plain runs against the baseline (no experiment, no git change) ---------------------------------

def pytest_in(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=repo,
                          env=env_for(repo), capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_plain_quality_run_and_single_case_against_the_baseline(loop_repo: Path) -> None:
    before = (git(loop_repo, "rev-parse", "HEAD"), git(loop_repo, "status", "--porcelain"), ledger_rows(loop_repo))
    whole = pytest_in(loop_repo, "-m", "quality", "-q")
    assert whole.returncode == 0 and "41 passed" in whole.stdout, whole.stdout[-3000:]
    case = "quality_suite/test_quality.py::test_case_against_baseline[digit0-s1000]"
    one = pytest_in(loop_repo, case, "-q")
    assert one.returncode == 0 and "1 passed" in one.stdout, one.stdout[-3000:]
    assert (loop_repo / ".autoresearch/runs/plain-pytest/quality.json").is_file()
    assert (git(loop_repo, "rev-parse", "HEAD"), git(loop_repo, "status", "--porcelain"),
            ledger_rows(loop_repo)) == before
    init = loop_repo / "model_under_test" / "__init__.py"  # an uncommitted edit: plain runs judge the tree
    init.write_text(init.read_text() + wrap("dim", """
pipe = _build_dim(spec)
generate = pipe.generate

def dim_generate(requests):
    out = generate(requests)
    out.images = out.images * 0.8
    return out

pipe.generate = dim_generate
return pipe"""))
    dirty = pytest_in(loop_repo, case, "-q")
    assert dirty.returncode == 1 and "psnr_db case digit0-s1000" in dirty.stdout, dirty.stdout[-3000:]
    assert ledger_rows(loop_repo) == before[2] and git(loop_repo, "rev-parse", "HEAD") == before[0]


# -- setup errors: refused (exit 2), nothing changed ---------------------------------------------

def snapshot(repo: Path) -> tuple:
    state = repo / ".autoresearch"
    runs = sorted(p.name for p in (state / "runs").iterdir()) if (state / "runs").is_dir() else []
    ledger = (state / "results.tsv").read_bytes() if (state / "results.tsv").exists() else b""
    return git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain"), ledger, runs


@pytest.mark.slow
def test_experiment_refuses_a_required_metric_without_weights(loop_repo: Path, monkeypatch) -> None:
    """check_available runs in Experiment.begin() before the scope verdict and before any run folder."""
    from pytest_dit_ar import experiment as exp_mod

    set_slow(loop_repo, 0.0, "faster")
    before = snapshot(loop_repo)
    real_load = exp_mod.load_context

    def needs_clip(*args, **kwargs):
        ctx = real_load(*args, **kwargs)
        quality = {**ctx.lane.quality, "clip": {"model": "ViT-B-32", "weights": "weights/missing.safetensors"}}
        ctx.lane = dataclasses.replace(ctx.lane, task_metrics=ctx.lane.task_metrics + ("clip_score",), quality=quality)
        return ctx

    monkeypatch.setattr(exp_mod, "load_context", needs_clip)
    exp = exp_mod.Experiment(loop_repo / "config" / "autoresearch.json", None, "exact", "faster")
    try:
        with pytest.raises(Refused, match="clip_score is a required metric .*missing.safetensors does not exist"):
            exp.begin()
    finally:
        exp.release()
    assert snapshot(loop_repo) == before


def test_baseline_refuses_a_required_metric_without_weights(tmp_path: Path) -> None:
    repo = make_project_copy(tmp_path / "repo")
    cfg_path = repo / "config" / "autoresearch.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["lanes"]["embedded-cpu"]["task_metrics"].append("clip_score")
    cfg["quality"]["clip"] = {"model": "ViT-B-32", "weights": "weights/open_clip_vit_b32.safetensors"}
    cfg_path.write_text(json.dumps(cfg, indent=2))
    git(repo, "commit", "-qam", "require clip_score")
    run(repo, "init", "--tag", "t1", "--lane", "embedded-cpu", check=True)
    before = snapshot(repo)
    proc = run(repo, "baseline", "--quiet")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "clip_score" in proc.stderr and "open_clip_vit_b32.safetensors does not exist" in proc.stderr
    assert "create_model('ViT-B-32'" in proc.stderr  # says how to provide the weights
    assert snapshot(repo) == before and not (repo / ".autoresearch/baseline").exists()


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["missing", "tampered"])
def test_missing_or_tampered_baseline_is_refused(loop_repo: Path, damage: str) -> None:
    set_slow(loop_repo, 0.0, "faster")
    folder = loop_repo / ".autoresearch/baseline/embedded-cpu"
    if damage == "missing":
        shutil.rmtree(folder)
    else:  # loosen the recorded envelope: the manifest no longer matches
        summary = json.loads((folder / "baseline.json").read_text())
        summary["envelope"]["latent_rel_l2"] = 1.0
        (folder / "baseline.json").write_text(json.dumps(summary))
    before = snapshot(loop_repo)
    proc = experiment(loop_repo, "exact", "faster")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert ("no baseline" in out) if damage == "missing" else ("does not match its manifest" in out)
    assert snapshot(loop_repo) == before
