"""`dit-ar demo`: the whole loop on the embedded CPU lane in one command, in a scratch clone.

doctor -> init -> baseline, then a built-in series of candidate commits, each judged by
`dit-ar experiment`: an exact speedup, a step cut (approximate), a dynamic int8 quantization declared numerical (the
audit raises it to quantization) and a slower change. Ends with the ledger and the report's path (the report without
the best's confirmation on fresh seeds, which `dit-ar summary` runs: it would double the step cut's cases).
The candidates are patch files (demo_patches/, written by lab/tools/make_demo_patches.py) applied with
`git apply`, exactly as a person would apply an idea to model_under_test/. In its clone, a commit before `init` turns
the lane's warm fork servers on (`performance.warm_servers`), and the keeper the last experiment starts is stopped
when the demo ends.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from dit_ar_contract.config import repo_root_for
from dit_ar_contract.errors import Refused

PATCHES = Path(__file__).resolve().parent / "demo_patches"
# the verdicts the README documents for each candidate (lab/tools/demo_repeat.py counts how often a fresh demo gives
# them). The int8 candidate comes after the half-step keep: its paired task-score tests must show the tolerance claim
# against that parent (within the metrics' resolution) and stay within the approximate margin of the baseline; the
# judge's probability of the labelled digit falls by about 0.0004 for int8 alone, ten times the resolution (4e-5;
# lab/notebook/quality-verdict.md), so it is refused on quality with the interval printed. It is declared numerical:
# the audit finds int8 weights and judges it as quantization (the stricter class), which is the demo's mis-declared
# class. Why not a bf16 cast declared exact: it sits on the edge of the numerical gate (two possible verdicts) and
# costs a whole experiment (lab/notebook/demo-runs.md, "The 4-candidate demo").
DOCUMENTED: dict[str, tuple[str, ...]] = {
    "01-exact-batch-cfg": ("KEEP",), "02-approximate-half-steps": ("KEEP",),
    "03-numerical-int8-dynamic": ("DISCARD-QUALITY",), "04-exact-wasted-pass": ("DISCARD-PERFORMANCE",)}


@dataclass(frozen=True)
class Candidate:
    """One idea: a patch of model_under_test/, its declared class, its description and what to expect."""

    patch: Path
    classification: str
    description: str
    expect: str


def _header(patch: Path) -> dict[str, str]:
    fields = {}
    for line in patch.read_text().splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(": ")
        fields[key.lower()] = value
    return fields


def candidates(folder: Path = PATCHES) -> list[Candidate]:
    """The demo's candidates in order, read from their patch headers."""
    out = []
    for patch in sorted(folder.glob("*.patch")):
        h = _header(patch)
        out.append(Candidate(patch, h["classification"], h["subject"], h["expect"]))
    return out


def apply(repo: Path, cand: Candidate) -> None:
    """`git apply` the candidate; refuse loudly when it no longer fits the model."""
    proc = subprocess.run(["git", "apply", str(cand.patch)], cwd=repo, capture_output=True, text=True)
    if proc.returncode != 0:
        raise Refused(f"demo candidate '{cand.description}' no longer applies to model_under_test/ "
                      f"({proc.stderr.strip()}); regenerate the patches with python -m lab.tools.make_demo_patches")


def _run(cmd: list[str], cwd: Path, env: dict[str, str], echo: bool = True) -> subprocess.CompletedProcess:
    """Run one CLI step; its progress lines (`dit-ar: ...`, one per phase in a pipe) are shown as they come."""
    from ..loop.workers.live import PREFIX

    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, stderr=err)
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(PREFIX):
                print("      " + line.rstrip()[len(PREFIX):], flush=True)
        code = proc.wait()
        err.seek(0)
        done = subprocess.CompletedProcess(cmd, code, "".join(lines), err.read())
    result = [line for line in done.stdout.strip().splitlines() if not line.startswith(PREFIX)]
    if echo and result:
        print("\n".join("    " + line for line in result[-6:]), flush=True)
    return done


CONFIG = "config/autoresearch.json"
WARM_COMMIT = "demo: warm fork servers on the lane (the demo stops their keeper when it ends)"


def warm_servers_on(repo: Path, lane: str) -> None:
    """Turn the lane's `performance.warm_servers` on in the clone's config and commit it (before `init`, so the
    session's integrity and baseline include it). Each experiment then forks its first worker and its quality pair
    from servers whose imports ran while the previous step's process started and ended, instead of exec'ing them
    after its own start (docs/design/speed-verdict.md, "Fork servers")."""
    path = repo / CONFIG
    data = json.loads(path.read_text())
    data["lanes"][lane].setdefault("performance", {})["warm_servers"] = True
    path.write_text(json.dumps(data, indent=2) + "\n")
    subprocess.run(["git", "commit", "-qam", WARM_COMMIT], cwd=repo, check=True)


def stop_warm_servers(repo: Path) -> str | None:
    """End the keeper the last experiment started (and its servers), if any; what was stopped."""
    from ..loop.speed import warm_servers
    from ..state.paths import StatePaths

    return warm_servers.stop(StatePaths(repo))


def run_demo(source: Path, scratch: Path, lane: str = "embedded-cpu") -> int:
    """Clone source into scratch and drive the loop there with the CLI."""
    started = time.perf_counter()
    repo = scratch / "project"
    subprocess.run(["git", "clone", "-q", str(source), str(repo)], check=True)
    check_clone(repo)
    for key, value in (("user.name", "dit-ar demo"), ("user.email", "demo@dit-ar.invalid")):
        subprocess.run(["git", "config", key, value], cwd=repo, check=True)
    warm_servers_on(repo, lane)
    try:
        return _drive(repo, lane, started)
    finally:
        stopped = stop_warm_servers(repo)
        if stopped:
            print(f"warm servers stopped ({stopped})", flush=True)


def _drive(repo: Path, lane: str, started: float) -> int:
    """doctor, init, baseline, the candidates, the ledger and the report, each a CLI process in the clone."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    cli = [sys.executable, "-m", "pytest_dit_ar.cli", "--config", CONFIG]

    def step(title: str, *args: str) -> subprocess.CompletedProcess:
        print(f"[{time.perf_counter() - started:5.0f}s] {title}: dit-ar {' '.join(args)}", flush=True)
        return _run(cli + list(args), repo, env)

    for title, args in (("doctor", ["doctor"]), ("init", ["init", "--tag", "demo", "--lane", lane]),
                        ("baseline", ["baseline"])):
        proc = step(title, *args)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return proc.returncode
    series = candidates()
    for i, cand in enumerate(series, start=1):
        apply(repo, cand)
        subprocess.run(["git", "commit", "-qam", cand.description], cwd=repo, check=True)
        print(f"[{time.perf_counter() - started:5.0f}s] candidate {i}/{len(series)}: {cand.description} "
              f"(declared {cand.classification}) — {cand.expect}", flush=True)
        proc = _run(cli + ["experiment", "--classification", cand.classification, "--description", cand.description],
                    repo, env, echo=False)
        lines = proc.stdout.strip().splitlines()
        summary = [ln for ln in lines if ln.startswith(("class:", "quality:", "quality test:", "timed quality:",
                                                        "speed:", "- "))][:8]
        for line in summary + lines[-1:]:
            print("    " + line[:200], flush=True)
        if proc.returncode == 2:
            print(proc.stdout[-2000:] + proc.stderr[-2000:], file=sys.stderr)
            return 2
    print(f"[{time.perf_counter() - started:5.0f}s] ledger:", flush=True)
    _run(cli + ["status", "--rows", "20"], repo, env)
    report = _run(cli + ["report", "--no-confirm"], repo, env, echo=False)  # the confirmation: `dit-ar summary`
    print(report.stdout.strip().splitlines()[-1] if report.stdout.strip() else report.stderr[-500:])
    print("the best's confirmation on fresh seeds (an approximate or quantization best) is left out here to keep the "
          "demo short: `dit-ar summary` in the project copy runs it")
    print(f"demo finished in {time.perf_counter() - started:.0f} s; the project copy is in {repo}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("demo", help="the whole loop on the embedded CPU lane in a scratch clone",
                       description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a new temp folder)")
    p.set_defaults(func=_main)
    return p


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)


def check_source(source: Path) -> None:
    """Refuse before anything runs when the checkout cannot give the demo the project's own model: a research
    branch (its model_under_test/ has the session's changes; the demo's candidates are written for the original)."""
    from ..state.gitops import BRANCH_PREFIX

    branch = _git(source, "rev-parse", "--abbrev-ref", "HEAD").stdout.strip()
    if branch.startswith(BRANCH_PREFIX):
        others = [b for b in _git(source, "for-each-ref", "--format=%(refname:short)", "refs/heads").stdout.split()
                  if not b.startswith(BRANCH_PREFIX)]
        switch = f"`git switch {others[0]}`" if others else "`git switch <the branch you started from>`"
        raise Refused(f"{source} is on the research branch {branch}: the demo clones this checkout and needs the "
                      f"project's own model_under_test/; run it from the main line ({switch}, then `dit-ar demo`; "
                      f"{branch} and its session are left as they are) or from a fresh clone")


def check_clone(repo: Path) -> None:
    """Refuse before the baseline when the first candidate does not fit the cloned model."""
    first = candidates()[0]
    proc = _git(repo, "apply", "--check", str(first.patch))
    if proc.returncode != 0:
        raise Refused(f"demo candidate '{first.description}' does not apply to {repo}/model_under_test/ "
                      f"({proc.stderr.strip()[:200]}): run the demo from a checkout whose model_under_test/ is the "
                      f"project's original (`git switch main`, or a fresh clone)")


def _main(args: argparse.Namespace) -> int:
    source = repo_root_for(args.config)
    check_source(source)
    scratch = args.dir or Path(tempfile.mkdtemp(prefix="dit-ar-demo-"))
    scratch.mkdir(parents=True, exist_ok=True)
    if (scratch / "project").exists():
        raise Refused(f"{scratch / 'project'} exists already: pick another --dir")
    return run_demo(source, scratch)
