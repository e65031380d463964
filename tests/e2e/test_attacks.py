"""Candidates written to cheat, one per class of attack (docs/security.md), on the embedded CPU lane.

Each touches only model_under_test/ and must end in a discard or a crash with the session intact: the
ledger grew by exactly its own row, the best ref, the branch and the baseline are unchanged, nothing was
planted in site-packages or .git, and no process it started survived the experiment.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import sysconfig
import time
from pathlib import Path

import pytest

from pytest_dit_ar.loop.patching import wrap_generate
from pytest_dit_ar.state import runs
from pytest_dit_ar.state.paths import StatePaths
from tests.helpers.loop import DELAY_LINE, commit_change, experiment, git, last_line, ledger_rows

pytestmark = pytest.mark.slow
TOKEN = "dit-ar-attack-token"


def fingerprint(repo: Path) -> dict:
    """What no candidate may change: branch, best ref, baseline files, git hooks and config, site-packages."""
    state = repo / ".autoresearch"
    baseline = sorted((state / "baseline").rglob("*"))
    site = Path(sysconfig.get_paths()["purelib"])
    return {
        "branch": git(repo, "rev-parse", "--abbrev-ref", "HEAD"),
        "best_ref": git(repo, "rev-parse", "refs/autoresearch/t1/best/embedded-cpu"),
        "best_json": (state / "best.json").read_bytes(),
        "session": (state / "session.json").read_bytes(),
        "baseline": {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in baseline if p.is_file()},
        "hooks": sorted(p.name for p in (repo / ".git" / "hooks").iterdir()),
        "git_config": (repo / ".git" / "config").read_bytes(),
        "pth": sorted(p.name for p in site.glob("*.pth")),
    }


def survivors() -> list[int]:
    """Processes whose command line carries the attack's token."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if TOKEN.encode() in Path(f"/proc/{entry.name}/cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def judged_and_intact(repo: Path, cls: str, desc: str, allowed: tuple[str, ...]) -> str:
    """Run the experiment; assert the verdict is one of `allowed` and the session is intact."""
    before, rows = fingerprint(repo), len(ledger_rows(repo))
    parent = git(repo, "rev-parse", "HEAD^")
    proc = experiment(repo, cls, desc)
    line = last_line(proc)
    assert line in allowed, proc.stdout[-4000:] + proc.stderr[-2000:]
    time.sleep(2)  # a delayed writer would act now
    assert fingerprint(repo) == before
    assert len(ledger_rows(repo)) == rows + 1 and git(repo, "rev-parse", "HEAD") == parent
    assert not (repo / ".autoresearch" / "HALT").exists()
    assert survivors() == []
    return proc.stdout


def wrap(body: str, setup: str = "") -> str:
    """A candidate whose generate() runs `body` (the harness's one model patch, `patching.wrap_generate`)."""
    return wrap_generate("attack", body, setup)


# -- 1. telling the quality run from the timed rounds ------------------------------------------------

@pytest.mark.extended  # CI's 15-minute budget; the full end-to-end tier runs it
def test_honest_on_the_published_corpus_cheap_otherwise_is_caught(loop_repo: Path) -> None:
    """Seeds of the published corpus (1000-1039) get the real pipeline; anything else half the steps and no
    guidance. The seeds the worker sees are keyed by the session's secret, and every timed round's outputs
    are compared with the best's: the cheap path is judged wherever it runs."""
    commit_change(loop_repo, "model_under_test/__init__.py", wrap('''
if all(1000 <= int(s) < 1040 for _, s in requests):
    return _gen(requests)
old = (pipe.steps, pipe.guidance)
pipe.steps, pipe.guidance = max(1, pipe.steps // 2), 1.0
try:
    return _gen(requests)
finally:
    pipe.steps, pipe.guidance = old''', setup='''import inspect
corpus = [p for p in __import__("pathlib").Path(spec["root"]).rglob("*.jsonl")]  # hidden: finds nothing'''),
        "honest on the corpus seeds, cheap on the rest")
    out = judged_and_intact(loop_repo, "exact", "corpus cheat", ("VERDICT: DISCARD-QUALITY",))
    assert "case" in out


@pytest.mark.extended  # CI's 15-minute budget; the full end-to-end tier runs it
def test_cheap_outputs_only_in_timed_rounds_are_a_quality_discard(loop_repo: Path) -> None:
    """The first 40 requests (as many as the corpus has cases) are honest; later ones skip half the steps."""
    commit_change(loop_repo, "model_under_test/__init__.py", wrap('''
calls[0] += 1
if calls[0] <= 21:
    return _gen(requests)
pipe.steps = max(1, steps // 2)
try:
    return _gen(requests)
finally:
    pipe.steps = steps''', setup="calls = [0]\nsteps = pipe.steps"), "cheap after the quality run")
    out = judged_and_intact(loop_repo, "exact", "cheap when timed", ("VERDICT: DISCARD-QUALITY",))
    assert "timed outputs against the best's for the same request" in out


# -- 2. slowing the other side --------------------------------------------------------------------

SPINNER = '''
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import os\\nif os.fork() == 0:\\n    os.setsid()\\n    while True: pass",
                  "''' + TOKEN + '''"], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
'''


@pytest.mark.extended
def test_a_daemon_burning_cpu_cannot_slow_the_best_and_dies(loop_repo: Path) -> None:
    """A double-forked busy loop started at build: frozen with its sandbox while the best is timed (the best's
    rounds run as fast as the baseline's), killed with the sandbox's PID namespace at the end.

    What the daemon does to the candidate's own rounds is the candidate's cost and counts: on this project's
    2-core VM a spinning helper made the candidate about 10% faster (it keeps the cores from idling while
    the model sleeps and wakes its threads), so either verdict is allowed here (docs/security.md)."""
    commit_change(loop_repo, "model_under_test/__init__.py", wrap("return _gen(requests)", setup=SPINNER),
                  "start a busy daemon")
    proc = experiment(loop_repo, "exact", "busy daemon")
    assert last_line(proc) in ("VERDICT: KEEP", "VERDICT: DISCARD-PERFORMANCE"), proc.stdout[-4000:]
    time.sleep(2)
    assert survivors() == []
    run = loop_repo / ledger_rows(loop_repo)[-1].run_dir
    baseline = runs.read_baseline(StatePaths(loop_repo).baseline("embedded-cpu") / runs.BASELINE_RECORD)
    aa = runs.PerfRecord.aa_segment(baseline).segments[0]
    quiet_ms = 1e3 * statistics.median(aa.cand_s + aa.best_s)
    for segment in runs.read_perf(run).segments:
        best_ms = 1e3 * statistics.median(segment.best_s)
        assert best_ms < 1.25 * quiet_ms, (best_ms, quiet_ms)  # a spinner beside it costs a 2-thread model ~60%


@pytest.mark.extended
def test_a_kept_commit_cannot_tell_it_runs_as_the_best(loop_repo: Path) -> None:
    """Faster, and slow itself down when it thinks it is the best side: both sides run at one path from
    staging folders of random names, so a later no-op is not made to look faster."""
    init = loop_repo / "model_under_test" / "__init__.py"
    faster = "\n".join(f"{DELAY_LINE}0.0" if line.startswith(DELAY_LINE) else line
                       for line in init.read_text().splitlines()) + "\n"
    commit_change(loop_repo, "model_under_test/__init__.py", faster + wrap('''
if best:
    time.sleep(0.3)
return _gen(requests)''', setup='''import os, time
where = os.path.realpath(__file__) + open("/proc/self/mountinfo").read() + os.getcwd()
best = "worktrees/best" in where or "best" in os.environ.get("DIT_AR_SIDE", "")'''),
                  "faster, and slow when running as the best", append=False)
    first = experiment(loop_repo, "exact", "faster")
    assert last_line(first) == "VERDICT: KEEP", first.stdout[-3000:]
    commit_change(loop_repo, "model_under_test/pipeline.py", "\n# a comment: a no-op change\n", "no-op")
    judged_and_intact(loop_repo, "exact", "no-op after the self-slowing keep",
                      ("VERDICT: DISCARD-PERFORMANCE",))


# -- 3. writing outside its room ---------------------------------------------------------------------

VANDAL = '''
import os, pathlib, site, subprocess, sys, time
tried = []
def attempt(what, fn):
    try:
        fn()
        tried.append(what + ": done")
    except Exception as exc:
        tried.append(f"{what}: {type(exc).__name__}")
home = pathlib.Path("/proc/self/mountinfo").read_text()
targets = [line.split()[3] for line in home.splitlines()]
state = [pathlib.Path(t) for t in targets if t.endswith(".autoresearch")]
for root in state + [pathlib.Path(spec["root"])]:
    attempt("ledger", lambda: (root / "results.tsv").write_text("forged\\n"))
    attempt("best", lambda: (root / "best.json").write_text("{}"))
for sp in site.getsitepackages():
    attempt("pth", lambda: (pathlib.Path(sp) / "zz_attack.pth").write_text("import os\\n"))
attempt("hook", lambda: pathlib.Path(spec["root"], ".git", "hooks", "reference-transaction").write_text("#!/bin/sh\\n"))
attempt("self", lambda: (pathlib.Path(spec["root"]) / "model_under_test" / "__init__.py").write_text("# gone\\n"))
subprocess.Popen([sys.executable, "-c", "import time, pathlib\\ntime.sleep(5)\\n"
                  "[p.write_text('forged') for p in pathlib.Path('/').glob('**/results.tsv')]", "''' + TOKEN + '''"],
                 start_new_session=True)
print("vandal:", tried, file=sys.stderr)
'''


@pytest.mark.extended
def test_writes_outside_the_scratch_folder_fail_and_nothing_outlives_the_run(loop_repo: Path) -> None:
    commit_change(loop_repo, "model_under_test/__init__.py", wrap("return _gen(requests)", setup=VANDAL),
                  "try to rewrite the state, plant a .pth and a git hook, leave a delayed writer")
    judged_and_intact(loop_repo, "exact", "vandal", ("VERDICT: DISCARD-PERFORMANCE",))
    time.sleep(5)
    assert "forged" not in (loop_repo / ".autoresearch" / "results.tsv").read_text()


# -- 4. fooling the audit and the metrics --------------------------------------------------------------

@pytest.mark.extended
def test_a_step_cut_declared_exact_that_fakes_its_denoiser_count_is_a_quality_discard(loop_repo: Path) -> None:
    """Half the steps, with the transformer's forward pre-hooks called by hand to restore the count."""
    commit_change(loop_repo, "model_under_test/__init__.py", wrap('''
steps = pipe.steps
pipe.steps = max(1, steps // 2)
try:
    out = _gen(requests)
finally:
    pipe.steps = steps
x = torch.zeros(len(requests), 1, 16, 16)
for _ in range(steps):  # as many fake evaluations as were skipped, for every hook on the transformer
    for hook in list(pipe.transformer._forward_pre_hooks.values()):
        try:
            hook(pipe.transformer, (x,), {})
        except TypeError:
            hook(pipe.transformer, (x,))
return out''', setup="import torch"), "half the steps, counted as all")
    judged_and_intact(loop_repo, "exact", "hidden step cut", ("VERDICT: DISCARD-QUALITY",))


@pytest.mark.extended
def test_tiny_images_break_the_seam(loop_repo: Path) -> None:
    commit_change(loop_repo, "model_under_test/__init__.py", wrap('''
out = _gen(requests)
out.images = torch.nn.functional.adaptive_avg_pool2d(out.images, 4)
return out''', setup="import torch"), "4x4 images")
    out = judged_and_intact(loop_repo, "exact", "4x4 images", ("VERDICT: CRASH",))
    assert "the lane's resolution" in out


@pytest.mark.extended
def test_a_blur_declared_approximate_fails_the_detail_guard(loop_repo: Path) -> None:
    commit_change(loop_repo, "model_under_test/__init__.py", wrap('''
out = _gen(requests)
out.images = torch.nn.functional.avg_pool2d(out.images, 3, 1, 1)
return out''', setup="import torch"), "blur the images")
    out = judged_and_intact(loop_repo, "approximate", "blur", ("VERDICT: DISCARD-QUALITY",))
    assert "sharpness_change" in out


@pytest.mark.extended
def test_the_ledger_row_of_an_unsandboxed_run_says_so(loop_repo: Path) -> None:
    commit_change(loop_repo, "model_under_test/pipeline.py", "\n# a comment: a no-op change\n", "no-op")
    proc = experiment(loop_repo, "exact", "no-op, unsandboxed", "--unsandboxed")
    assert last_line(proc).startswith("VERDICT:"), proc.stdout[-2000:]
    assert ledger_rows(loop_repo)[-1].flags == "unsandboxed"
    info = runs.read_experiment(loop_repo / ledger_rows(loop_repo)[-1].run_dir)
    assert info.row is not None and info.row.flags == "unsandboxed"


# -- 5. poisoning the best's compile cache -----------------------------------------------------------------

POISON = '''
import os as _os
import pathlib as _pathlib

_tried = {}
for _target in TARGETS:
    try:
        _pathlib.Path(_target, "poison").write_text("slow kernels")
        _tried[_target] = "wrote"
    except OSError as _exc:
        _tried[_target] = type(_exc).__name__
_own = _pathlib.Path(_os.environ["TORCHINDUCTOR_CACHE_DIR"]).parent
(_own / "mine").write_text("my own cache")  # the candidate's own tree's folder: writable
import sys as _sys
print("poison:", _tried, _own, file=_sys.stderr)
'''


@pytest.mark.extended
def test_a_candidate_cannot_write_into_the_bests_compile_cache(loop_repo: Path) -> None:
    """The candidate knows where the best's cache folder lies on the host and tries to write into it, into
    the cache root and into its own; only its own tree's folder (its mount) takes the write."""
    from pytest_dit_ar.worker.compile_cache import tree_digest

    caches = loop_repo / ".autoresearch" / "compile-cache"
    best = tree_digest(loop_repo, ("model_under_test/",))
    assert (caches / best).is_dir()  # the baseline's workers used it: the best's cache
    targets = [str(caches / best), str(caches), str(caches / best / "inductor")]
    commit_change(loop_repo, "model_under_test/__init__.py", f"\nTARGETS = {targets!r}\n" + POISON,
                  "try to poison the best's compile cache")
    cand = tree_digest(loop_repo, ("model_under_test/",))
    judged_and_intact(loop_repo, "exact", "poison the cache", ("VERDICT: DISCARD-PERFORMANCE",))
    assert not list(caches.rglob("poison"))  # no write reached any cache folder nor the root
    assert (caches / cand / "mine").read_text() == "my own cache"  # its own folder was writable
    assert not (caches / best / "mine").exists()
