"""`dit-ar demo`: the whole loop on the embedded CPU lane in one command, in a scratch clone.

doctor -> init -> baseline, then a built-in series of candidate commits, each judged by
`dit-ar experiment`: an exact speedup, a bf16 cast declared exact (the audit raises it), a step cut,
a dynamic int8 quantization and a slower change. Ends with the ledger and the report's path.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .config import repo_root_for
from .errors import Refused

PIPELINE = "model_under_test/pipeline.py"
EMBEDDED = "model_under_test/embedded.py"


@dataclass(frozen=True)
class Candidate:
    """One idea: a text edit of one file in model_under_test/, its declared class and description."""

    path: str
    old: str
    new: str
    classification: str
    description: str
    expect: str  # what the demo expects the harness to say, shown beside the verdict


CFG_SPLIT = """                    eps_cond = self.predict_noise(model_input, t, labels)
                    eps_uncond = self.predict_noise(model_input, t, null)
"""
CFG_BATCHED = """                    both = self.predict_noise(torch.cat([model_input, model_input]), t, torch.cat([labels, null]))
                    eps_cond, eps_uncond = both.chunk(2)
"""
LOAD = "    transformer.to(device).eval().requires_grad_(False)\n"
RETURN = "    return transformer, make_sampler()\n"
STEP = "                latents = self.scheduler.step(eps, t, latents).prev_sample\n"

CANDIDATES = (
    Candidate(PIPELINE, CFG_SPLIT, CFG_BATCHED, "exact",
              "run the two classifier-free guidance passes as one batched forward",
              "an exact speedup: expected KEEP"),
    Candidate(EMBEDDED, LOAD, LOAD + "    transformer.to(torch.bfloat16)\n", "exact",
              "cast the denoiser to bf16 (declared exact)",
              "the audit raises the class to numerical; judged there"),
    Candidate(PIPELINE, "        self.steps = int(steps)\n", "        self.steps = max(1, int(steps) // 2)\n", "approximate",
              "halve the number of sampling steps",
              "fewer denoiser evaluations: the approximate gate (task quality within a margin)"),
    Candidate(EMBEDDED, RETURN, "    transformer = torch.ao.quantization.quantize_dynamic("
                                "transformer.float(), {torch.nn.Linear}, dtype=torch.qint8)\n" + RETURN, "quantization",
              "dynamic int8 quantization of every Linear",
              "the zero-regression gate: every task score >= baseline, every passing case still passes"),
    Candidate(PIPELINE, STEP, "                self.predict_noise(model_input, t, labels)  # wasted work\n" + STEP,
              "exact", "evaluate one extra denoiser pass per step (slower)",
              "a slower change: expected DISCARD-PERFORMANCE"),
)


def _run(cmd: list[str], cwd: Path, env: dict[str, str], echo: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, text=True, capture_output=True)
    if echo and proc.stdout.strip():
        print("\n".join("    " + line for line in proc.stdout.strip().splitlines()[-6:]), flush=True)
    return proc


def apply(repo: Path, cand: Candidate) -> None:
    """Edit the file; refuse loudly if the model no longer contains the text the candidate replaces."""
    path = repo / cand.path
    text = path.read_text()
    if cand.old not in text:
        raise Refused(f"demo candidate '{cand.description}' no longer applies: {cand.path} lacks the expected code")
    path.write_text(text.replace(cand.old, cand.new, 1))


def run_demo(source: Path, scratch: Path, lane: str = "embedded-cpu") -> int:
    """Clone source into scratch and drive the loop there with the CLI."""
    started = time.perf_counter()
    repo = scratch / "project"
    subprocess.run(["git", "clone", "-q", str(source), str(repo)], check=True)
    for key, value in (("user.name", "dit-ar demo"), ("user.email", "demo@dit-ar.invalid")):
        subprocess.run(["git", "config", key, value], cwd=repo, check=True)
    env = {**os.environ, "PYTHONPATH": str(repo)}
    cli = [sys.executable, "-m", "pytest_dit_ar.cli", "--config", "config/autoresearch.json"]

    def step(title: str, *args: str) -> subprocess.CompletedProcess:
        print(f"[{time.perf_counter() - started:5.0f}s] {title}: dit-ar {' '.join(args)}", flush=True)
        return _run(cli + list(args), repo, env)

    for title, args in (("doctor", ["doctor"]), ("init", ["init", "--tag", "demo", "--lane", lane]),
                        ("baseline", ["baseline", "--quiet"])):
        proc = step(title, *args)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return proc.returncode
    for i, cand in enumerate(CANDIDATES, start=1):
        apply(repo, cand)
        subprocess.run(["git", "commit", "-qam", cand.description], cwd=repo, check=True)
        print(f"[{time.perf_counter() - started:5.0f}s] candidate {i}/{len(CANDIDATES)}: {cand.description} "
              f"(declared {cand.classification}) — {cand.expect}", flush=True)
        proc = _run(cli + ["experiment", "--classification", cand.classification, "--description", cand.description],
                    repo, env, echo=False)
        lines = proc.stdout.strip().splitlines()
        summary = [ln for ln in lines if ln.startswith(("class:", "quality:", "- "))][:4]
        for line in summary + lines[-1:]:
            print("    " + line[:200], flush=True)
        if proc.returncode == 2:
            print(proc.stdout[-2000:] + proc.stderr[-2000:], file=sys.stderr)
            return 2
    print(f"[{time.perf_counter() - started:5.0f}s] ledger:", flush=True)
    _run(cli + ["status", "--rows", "20"], repo, env)
    report = _run(cli + ["report"], repo, env, echo=False)
    print(report.stdout.strip().splitlines()[-1] if report.stdout.strip() else report.stderr[-500:])
    print(f"demo finished in {time.perf_counter() - started:.0f} s; the project copy is in {repo}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("demo", help="the whole loop on the embedded CPU lane in a scratch clone",
                       description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a new temp folder)")
    p.set_defaults(func=_main)
    return p


def _main(args: argparse.Namespace) -> int:
    source = repo_root_for(args.config)
    scratch = args.dir or Path(tempfile.mkdtemp(prefix="dit-ar-demo-"))
    scratch.mkdir(parents=True, exist_ok=True)
    if (scratch / "project").exists():
        raise Refused(f"{scratch / 'project'} exists already: pick another --dir")
    return run_demo(source, scratch)

