"""Candidates written to cheat, one per class of attack (docs/design/sandbox-and-security.md), on the embedded CPU lane.

Each touches only model_under_test/ and must end in a discard or a crash with the session intact: the
ledger grew by exactly its own row, the best ref, the branch and the baseline are unchanged, nothing was
planted in site-packages or .git, and no process it started survived the experiment.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sysconfig
import time
from pathlib import Path

import pytest

from pytest_dit_ar.loop.speed.patching import wrap_generate
from pytest_dit_ar.state import runs
from pytest_dit_ar.state.paths import StatePaths
from pytest_dit_ar.state.perf_record import PerfRecord
from tests.helpers.loop import DELAY_LINE, commit_change, experiment, git, last_line, ledger_rows
from tests.helpers.sandbox_required import require_sandbox

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
    the model sleeps and wakes its threads), so either verdict is allowed here (docs/design/sandbox-and-security.md)."""
    commit_change(loop_repo, "model_under_test/__init__.py", wrap("return _gen(requests)", setup=SPINNER),
                  "start a busy daemon")
    proc = experiment(loop_repo, "exact", "busy daemon")
    assert last_line(proc) in ("VERDICT: KEEP", "VERDICT: DISCARD-PERFORMANCE"), proc.stdout[-4000:]
    time.sleep(2)
    assert survivors() == []
    run = loop_repo / ledger_rows(loop_repo)[-1].run_dir
    baseline = runs.read_baseline(StatePaths(loop_repo).baseline("embedded-cpu") / runs.BASELINE_RECORD)
    aa = PerfRecord.aa_segment(baseline).segments[0]
    quiet_ms = 1e3 * statistics.median(aa.cand_s + aa.best_s)
    for segment in runs.read_perf(run).segments:
        best_ms = 1e3 * statistics.median(segment.best_s)
        assert best_ms < 1.25 * quiet_ms, (best_ms, quiet_ms)  # a spinner beside it costs a 2-thread model ~60%


def without_delay(repo: Path) -> str:
    """The model's __init__.py with its sleep before each generate set to zero (a real, exact win)."""
    init = repo / "model_under_test" / "__init__.py"
    return "\n".join(f"{DELAY_LINE}0.0" if line.startswith(DELAY_LINE) else line
                     for line in init.read_text().splitlines()) + "\n"


@pytest.mark.extended
def test_a_kept_commit_cannot_tell_it_runs_as_the_best(loop_repo: Path) -> None:
    """Faster, and slow itself down when it thinks it is the best side: both sides run at one path from
    staging folders of random names, so a later no-op is not made to look faster."""
    faster = without_delay(loop_repo)
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
    # the best worker runs with -I -B: no __pycache__ in the best worktree, so no DISCARD-SCOPE and no HALT
    assert last_line(proc) != "VERDICT: DISCARD-SCOPE" and not (loop_repo / ".autoresearch" / "HALT").exists()


# -- stopped cases of the round-3 red team, kept as tests -----------------------------------------------------

@pytest.mark.extended
def test_int8_levels_hidden_in_float32_declared_numerical_are_not_kept(loop_repo: Path) -> None:
    """The transformer's weights rounded to 255 levels per tensor but kept in float32 (no int8 dtype for the
    audit to see), declared numerical: the corpus aggregate catches it."""
    commit_change(loop_repo, "model_under_test/__init__.py", wrap("return _gen(requests)", setup='''import torch
with torch.no_grad():
    for p in pipe.components["transformer"].parameters():
        scale = p.abs().max().clamp(min=1e-12) / 127
        p.copy_((p / scale).round() * scale)'''), "int8 levels in float32")
    judged_and_intact(loop_repo, "numerical", "int8 levels, declared numerical",
                      ("VERDICT: DISCARD-QUALITY", "VERDICT: DISCARD-PERFORMANCE"))


@pytest.mark.extended
def test_a_module_never_imported_changes_nothing_but_is_flagged(loop_repo: Path) -> None:
    """Control: hostile code in a module nothing imports is a no-op (not kept), and the static pre-gate still
    names it in the ledger row's flags and experiment.json."""
    commit_change(loop_repo, "model_under_test/dormant.py", "import signal\nimport time\n\n\ndef arm():\n"
                  "    signal.signal(signal.SIGCONT, lambda *a: None)\n    return time.perf_counter()\n",
                  "a dormant module")
    judged_and_intact(loop_repo, "exact", "dormant module", ("VERDICT: DISCARD-PERFORMANCE",))
    row = ledger_rows(loop_repo)[-1]
    assert "pregate=" in row.flags and "signal" in row.flags
    info = json.loads((loop_repo / row.run_dir / "experiment.json").read_text())
    assert {f["rule"] for f in info["pregate"]} >= {"signal", "clock"}


# == round 3: one hostile worker at a time (no experiment needed; docs/design/sandbox-and-security.md) ==
# Each test starts one sandboxed worker of the embedded model with a hostile addition and asserts what the
# harness does about it: a recorded crash instead of a hang or a harness error, a freeze that waits for the
# kernel, memory it counts, nothing it can read or leave behind.

from dit_ar_contract.device import DeviceIdentity, LaneTarget  # noqa: E402
from dit_ar_contract.errors import CandidateCrash  # noqa: E402
from pytest_dit_ar.worker import cgroup, sandbox  # noqa: E402
from pytest_dit_ar.worker.client import SandboxPolicy, WorkerProcess  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROBE_MARK = "DIT-AR-PROBE "


def hostile_worker(tmp_path: Path, addition: str, timeout_s: float = 300.0) -> WorkerProcess:
    """A started and built sandboxed worker whose model_under_test/__init__.py ends with `addition`."""
    import shutil

    require_sandbox()
    tree = tmp_path / "side"
    shutil.copytree(ROOT / "model_under_test", tree / "model_under_test",
                    ignore=shutil.ignore_patterns("__pycache__"))
    init = tree / "model_under_test" / "__init__.py"
    init.write_text(init.read_text() + "\n" + addition)
    target = LaneTarget(lane="embedded-cpu", lane_id="embedded-cpu", device="cpu", identity=DeviceIdentity("cpu"),
                        on_target=True)
    policy = SandboxPolicy(hide=(ROOT / ".git",), expose=(ROOT,))
    worker = WorkerProcess("candidate", tree, target, 1, tmp_path / "worker.log", timeout_s, policy)
    worker.start()
    spec = {"root": str(sandbox.MOUNT), "lane": "embedded-cpu", "preset": "embedded-digits",
            "weights": str(ROOT / "assets" / "embedded-digits"), "device": "cpu", "resolution": 32, "steps": 2,
            "guidance": 3.0, "batch": 2, "options": {}, "gpus": 1}
    try:
        worker.request("build", spec=spec)
    except BaseException:
        worker.kill()
        raise
    return worker


def probe_report(worker: WorkerProcess) -> dict:
    for line in worker.log_path.read_text().splitlines():
        if line.startswith(PROBE_MARK):
            return json.loads(line[len(PROBE_MARK):])
    raise AssertionError("the probe wrote no report: " + worker.log_path.read_text()[-2000:])


# One hostile worker serves most tests of this section (a worker start is the expensive part): a generate
# whose first seed is one of these triggers that behaviour instead of honest outputs.
FIFO, SYMLINK, MALFORMED, OVERSIZED, KERNEL_WORK = 900001, 900002, 900003, 900004, 900005
READS = ("/etc/shadow", "/root", "/work/main", str(ROOT / ".git"))
HOSTILE_SETUP = """threads = []"""
HOSTILE_GENERATE = """
mode[0] = int(requests[0][1])
if mode[0] == KERNEL_WORK and not threads:
    for _ in range(2):
        threads.append(_th.Thread(target=_pread_forever, daemon=True))
        threads[-1].start()
out = _gen(requests)
out.latents[(0,) * out.latents.ndim] = float(seen[0])  # SIGCONTs seen since the last request
seen[0] = 0
return out"""
HOSTILE_MODULE = r'''
import fcntl as _fcntl, json as _json, os as _os, signal as _signal, sys as _sys, threading as _th, time as _time
import safetensors.torch as _st

mode, seen = [0], [0]
_real_save = _st.save_file


def _hostile_save(tensors, path, *a, **k):
    if mode[0] == FIFO:
        _os.mkfifo(path)
    elif mode[0] == SYMLINK:
        _os.symlink("/etc/hostname", path)
    elif mode[0] == MALFORMED:
        open(path, "wb").write(b"\x08" + b"\x00" * 7 + b"{ not json")
    elif mode[0] == OVERSIZED:
        with open(path, "wb") as f:
            f.truncate(8 << 30)
    else:
        _real_save(tensors, path, *a, **k)


_st.save_file = _hostile_save


def _count(*_):
    seen[0] += 1


_signal.signal(_signal.SIGCONT, _count)  # the phase oracle: a stop and a continue are visible to it

_kfd = _os.memfd_create("dit-ar-kernel-work")
_os.ftruncate(_kfd, 256 << 20)


def _pread_forever():
    buf = bytearray(256 << 20)
    while True:
        _os.preadv(_kfd, [buf], 0)  # long reads: time spent in the kernel, not in user code


# hidden memory: 150 MB in /dev/shm (tmpfs), 150 MB in a memfd, a 300 MB peak freed, VmHWM reset
_MB = 1 << 20
open("/dev/shm/arena", "wb").write(b"x" * (150 * _MB))
_mfd = _os.memfd_create("arena")
_os.write(_mfd, b"y" * (150 * _MB))
_peak = bytearray(b"z" * (300 * _MB))
_time.sleep(0.5)
del _peak
try:
    open("/proc/self/clear_refs", "w").write("5")
except OSError:
    pass

# what the sandbox lets it read, write and lock
_report = {"writable": [], "read": {}, "mountinfo": open("/proc/self/mountinfo").read()}
for _line in _report["mountinfo"].splitlines():
    _point = _line.split()[4]
    _subs = _os.listdir(_point) if _os.path.isdir(_point) and not _point.startswith(("/proc", "/sys")) else []
    for _dir in [_point] + [_os.path.join(_point, d) for d in _subs]:
        try:
            _os.close(_os.open(_os.path.join(_dir, ".dit-ar-probe"), _os.O_CREAT | _os.O_WRONLY, 0o600))
            _report["writable"].append(_dir)
        except OSError:
            pass
for _path in READS:
    try:
        _report["read"][_path] = sorted(_os.listdir(_path))[:5] if _os.path.isdir(_path) else open(_path).read()[:20]
    except OSError as exc:
        _report["read"][_path] = exc.strerror
_lockfile = open(WEIGHTS + "/model_index.json", "rb")
_fcntl.lockf(_lockfile, _fcntl.LOCK_SH | _fcntl.LOCK_NB)  # a lock the other side could test for
_report["uid"] = _os.getuid()
print(PROBE_MARK + _json.dumps(_report), file=_sys.stderr, flush=True)
'''


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory):
    constants = (f"FIFO, SYMLINK, MALFORMED, OVERSIZED, KERNEL_WORK = {FIFO}, {SYMLINK}, {MALFORMED}, {OVERSIZED}, "
                 f"{KERNEL_WORK}\nREADS = {READS!r}\nWEIGHTS = {str(ROOT / 'assets' / 'embedded-digits')!r}\n"
                 f"PROBE_MARK = {PROBE_MARK!r}\n")
    addition = constants + HOSTILE_MODULE + wrap(HOSTILE_GENERATE, setup=HOSTILE_SETUP)
    worker = hostile_worker(tmp_path_factory.mktemp("hostile"), addition)
    yield worker
    worker.kill()


def generate(worker: WorkerProcess, first_seed: int = 1):
    return worker.generate([["7", first_seed], ["3", 2]], resolution=32)


@pytest.mark.parametrize("kind", [FIFO, SYMLINK, MALFORMED, OVERSIZED])
def test_an_output_the_harness_cannot_read_is_the_candidates_crash(hostile: WorkerProcess, kind: int) -> None:
    """A FIFO, a symlink, a malformed or an 8 GiB file in place of the outputs: a CandidateCrash (the
    experiment records CRASH and resets), never a hang and never 'the harness failed'."""
    t0 = time.monotonic()
    with pytest.raises(CandidateCrash):
        generate(hostile, kind)
    assert time.monotonic() - t0 < 60
    assert [p.name for p in hostile.scratch.iterdir() if p.name.startswith("out-")] == []


@pytest.mark.extended  # a worker of its own plus the timeout: the shared hostile worker covers the rest in CI
def test_a_worker_that_never_answers_is_killed_as_a_crash(tmp_path: Path) -> None:
    worker = hostile_worker(tmp_path, wrap("import time\ntime.sleep(3600)"))
    worker.timeout_s = 5
    stage = worker.stage
    t0 = time.monotonic()
    with pytest.raises(CandidateCrash, match="no answer"):
        generate(worker)
    assert time.monotonic() - t0 < 40 and worker.processes() == []
    assert stage is not None and not stage.exists()  # its scratch is gone with it


def test_a_sigcont_handler_sees_the_same_thing_in_every_phase(hostile: WorkerProcess) -> None:
    """A worker counting SIGCONTs between requests sees the same count for every request, quality case or
    timed round (the worker is frozen between all of them); none at all with the cgroup freezer."""
    counts = [float(generate(hostile, i).latents.reshape(-1)[0]) for i in (1, 2)]
    hostile.freeze()  # the other side's timed round in between
    hostile.thaw()
    counts.append(float(generate(hostile, 3).latents.reshape(-1)[0]))
    assert len(set(counts)) == 1, counts
    if hostile.group is not None and hostile.group.freezer is not None:
        assert counts == [0.0, 0.0, 0.0], counts


def _cpu_ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime + stime
    return total


def test_the_freeze_waits_for_work_inside_the_kernel_and_then_nothing_runs(hostile: WorkerProcess) -> None:
    """Threads in endless huge preadv calls: once freeze() returns, no thread of the side is running or in a
    system call, and its CPU time does not move while it stays frozen (the best would be timed now)."""
    generate(hostile, KERNEL_WORK)  # starts the threads; the worker is frozen again when this returns
    pids = hostile.processes()
    states = cgroup.task_states(pids)
    assert states and not set(states.values()) & set("RD"), states
    before = _cpu_ticks(pids)
    time.sleep(1.0)
    assert _cpu_ticks(pids) == before
    assert hostile.freeze_waits and max(hostile.freeze_waits) < 30


def test_memory_in_tmpfs_memfd_and_a_freed_peak_is_counted(hostile: WorkerProcess) -> None:
    """150 MB in /dev/shm, 150 MB in a memfd and a 300 MB peak freed before any reading, VmHWM reset: the
    harness's sampled figure holds all of it."""
    assert hostile.peak_host_mb() >= 550


def _locks_of(pids: list[int]) -> list[str]:
    return [line for line in Path("/proc/locks").read_text().splitlines()
            if any(f" {pid} " in line for pid in pids)]


def test_the_sandbox_reads_and_keeps_only_its_own(hostile: WorkerProcess) -> None:
    """What a worker can write (only its own scratch, /tmp and /dev/shm, all gone with it), read (no
    /etc/shadow, /root, other checkouts, .git) and lock (nothing another side could see); mountinfo names
    no run or state folder; the worker is not root where the harness is."""
    report = probe_report(hostile)
    assert _locks_of(hostile.processes()) == []
    private = {str(sandbox.SCRATCH), "/tmp", "/dev/shm"}
    assert {w for w in report["writable"] if not any(w == p or w.startswith(p + "/") for p in private)} == set()
    assert report["read"]["/etc/shadow"] in ("Permission denied", "", "No such file or directory")
    assert report["read"]["/root"] in ([], [".pyenv"], "No such file or directory")  # at most the Python in it
    assert report["read"]["/work/main"] == "No such file or directory" or ROOT == Path("/work/main")
    assert report["read"][str(ROOT / ".git")] in ([], "", "No such file or directory", "Permission denied")
    assert ".autoresearch" not in report["mountinfo"] and "/stage/" not in report["mountinfo"]
    if os.geteuid() == 0 and sandbox.privileged():
        assert report["uid"] == sandbox.UNPRIVILEGED


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


# -- 6. the fallback without a cgroup (issue 25: SIGSTOP and the /proc state wait, memory from /proc) -----------
# `DIT_AR_NO_CGROUP=1` (pytest_dit_ar/worker/cgroup.py) makes the harness behave as on a machine without a
# writable cgroup hierarchy. The same closures must hold there: the freeze waits for in-kernel work, the memory
# a side hides in tmpfs or a memfd is counted, and a whole experiment judges a no-op as no win.

@pytest.mark.extended
def test_without_a_cgroup_the_freeze_still_waits_for_the_kernel_and_memory_is_counted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hostile worker of the section above, started with cgroups switched off: no cgroup, and still no
    thread running or in a system call once frozen, no CPU time while frozen, the same SIGCONT count in every
    phase (signals are visible here, so the count is the same, not zero), and the hidden memory counted."""
    monkeypatch.setenv(cgroup.DISABLE_VARIABLE, "1")
    constants = (f"FIFO, SYMLINK, MALFORMED, OVERSIZED, KERNEL_WORK = {FIFO}, {SYMLINK}, {MALFORMED}, {OVERSIZED}, "
                 f"{KERNEL_WORK}\nREADS = {READS!r}\nWEIGHTS = {str(ROOT / 'assets' / 'embedded-digits')!r}\n"
                 f"PROBE_MARK = {PROBE_MARK!r}\n")
    worker = hostile_worker(tmp_path, constants + HOSTILE_MODULE + wrap(HOSTILE_GENERATE, setup=HOSTILE_SETUP))
    try:
        assert worker.group is None  # the fallback is what runs
        counts = [float(generate(worker, i).latents.reshape(-1)[0]) for i in (1, 2)]
        worker.freeze()
        worker.thaw()
        counts.append(float(generate(worker, 3).latents.reshape(-1)[0]))
        assert len(set(counts)) == 1, counts

        generate(worker, KERNEL_WORK)  # two threads in endless 256 MB preadv calls from now on
        pids = worker.processes()
        states = cgroup.task_states(pids)
        assert worker.frozen and states and not set(states.values()) & set("RD"), states
        before = _cpu_ticks(pids)
        time.sleep(1.0)
        assert _cpu_ticks(pids) == before
        assert worker.freeze_waits and max(worker.freeze_waits) < 30

        assert worker.kernel_peak_mb() is None  # no cgroup counter: the /proc figure is the one
        assert worker.peak_host_mb() >= 550  # /dev/shm 150 + memfd 150 + the freed 300 MB peak, sampled
    finally:
        worker.kill()
    assert worker.processes() == []


@pytest.mark.extended
def test_without_a_cgroup_a_no_op_is_not_kept_and_the_session_is_intact(
        loop_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole experiment of a no-op commit on the fallback freeze (SIGSTOP + /proc waits, /proc memory) is
    discarded as no win, with the session intact; its perf record shows that no cgroup counter was read."""
    monkeypatch.setenv(cgroup.DISABLE_VARIABLE, "1")  # the harness's environment: `dit-ar experiment` inherits it
    commit_change(loop_repo, "model_under_test/pipeline.py", "\n# a comment: a no-op change\n", "no-op")
    judged_and_intact(loop_repo, "exact", "no-op without cgroups", ("VERDICT: DISCARD-PERFORMANCE",))
    perf = json.loads((loop_repo / ledger_rows(loop_repo)[-1].run_dir / "perf.json").read_text())
    memory = [seg["memory"][side] for seg in perf["segments"] for side in ("cand", "best")]
    assert memory and all(m["kernel_peak_mb"] is None and (m["peak_rss_mb"] or 0) > 0 for m in memory), memory


# -- 7. a channel across experiments through the tree's own compile cache (closed:
# docs/design/sandbox-and-security.md) --

COUNTER = '''import os, pathlib, time
_seen = pathlib.Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).parent / "sandboxes-seen"
with open(_seen, "a") as _f:
    _f.write(os.readlink("/proc/self/ns/pid") + "\\n")
# as a candidate (its first experiment) the tree runs in 2 sandboxes: the quality worker's and its fork
# server's; a third one means a later experiment, where a kept tree is the best
best = len(set(_seen.read_text().split())) >= 3'''


@pytest.mark.extended
def test_a_kept_commit_cannot_count_its_runs_in_its_own_compile_cache(loop_repo: Path) -> None:
    """A real win that also counts, in its own tree's compile-cache folder, the sandboxes it has run in, and
    slows itself once it has run in more than one experiment's (it is the best then): a later no-op must
    not be kept. Only the tree's first worker writes its folder; every later worker sees a throwaway copy of
    what that one left, so the count never tells the experiments apart (it was KEPT at +58.86% before)."""
    faster = without_delay(loop_repo)
    commit_change(loop_repo, "model_under_test/__init__.py", faster + wrap('''
if best:
    time.sleep(0.3)
return _gen(requests)''', setup=COUNTER), "faster, and slow once it has run in an earlier experiment", append=False)
    first = experiment(loop_repo, "exact", "faster, counting its sandboxes")
    assert last_line(first) == "VERDICT: KEEP", first.stdout[-3000:]
    commit_change(loop_repo, "model_under_test/pipeline.py", "\n# a comment: a no-op change\n", "no-op")
    judged_and_intact(loop_repo, "exact", "no-op after the run-counting keep", ("VERDICT: DISCARD-PERFORMANCE",))
