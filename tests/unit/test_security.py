"""Security v3 classes that need no worker (docs/design/sandbox-and-security.md): outputs the harness cannot read are
the
candidate's crash, the seccomp filter's shape, the sandbox's command line, the memory sampler, the static
pre-gate."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
import torch

from dit_ar_contract.errors import CandidateCrash
from pytest_dit_ar.loop.guards import pregate
from pytest_dit_ar.worker import cgroup, client, sandbox, seccomp


# -- making the harness blame itself --------------------------------------------------------------------
@pytest.mark.parametrize("make", ["fifo", "symlink", "folder", "missing"])
def test_a_special_file_in_place_of_an_output_is_a_crash_not_a_hang(tmp_path: Path, make: str) -> None:
    out = tmp_path / "out-1.safetensors"
    if make == "fifo":
        os.mkfifo(out)  # opening it for reading would block forever
    elif make == "symlink":
        (tmp_path / "real").write_bytes(b"x")
        out.symlink_to(tmp_path / "real")
    elif make == "folder":
        out.mkdir()
    with pytest.raises(CandidateCrash):
        client.read_output(out, 1 << 20)


def test_an_oversized_output_is_a_crash_before_it_is_read(tmp_path: Path) -> None:
    out = tmp_path / "out.safetensors"
    with open(out, "wb") as f:
        f.truncate(10 << 20)  # sparse: nothing is written, the size alone is refused
    with pytest.raises(CandidateCrash, match="MiB"):
        client.read_output(out, 1 << 20)


@pytest.mark.parametrize("data", [b"", b"not safetensors", struct.pack("<Q", 1 << 40) + b"{",
                                  struct.pack("<Q", 2) + b"{}"])
def test_malformed_outputs_are_the_candidates_crash(data: bytes) -> None:
    with pytest.raises(CandidateCrash, match="cannot read"):
        client.parse_outputs(data)


def test_well_formed_outputs_are_read(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    out = tmp_path / "out.safetensors"
    save_file({"images": torch.zeros(2, 3, 4, 4), "latents": torch.zeros(2, 1, 2, 2)}, str(out))
    images, latents = client.parse_outputs(client.read_output(out, 1 << 20))
    assert list(images.shape) == [2, 3, 4, 4] and list(latents.shape) == [2, 1, 2, 2]


def test_scratch_usage_counts_files_in_subfolders_without_following_links(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"x" * 100_000)
    (tmp_path / "link").symlink_to("/usr")
    used = client.folder_bytes(tmp_path, 1 << 30)
    assert 100_000 <= used < 1 << 20


# -- no channel between the sides: the seccomp filter ------------------------------------------------------
@pytest.mark.parametrize("machine", sorted(seccomp.TABLES))
def test_the_seccomp_filter_checks_the_architecture_first_and_ends_allowing(machine: str) -> None:
    prog = seccomp.program(machine)
    assert prog is not None and len(prog) % 8 == 0
    ins = [struct.unpack("<HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    assert ins[0] == (0x20, 0, 0, 4)  # load arch
    assert ins[1][0] == 0x15 and ins[1][3] == seccomp.TABLES[machine].audit_arch
    assert ins[-1] == (0x06, 0, 0, 0x7FFF0000)
    for i, (code, jt, jf, _k) in enumerate(ins):  # every jump lands inside the program
        if code & 0x07 == 0x05:
            assert i + 1 + max(jt, jf) < len(ins)
    returns = {k for code, _jt, _jf, k in ins if code == 0x06}
    assert 0x00050000 in returns  # lock calls: success without effect


def test_no_filter_where_the_architecture_is_not_covered() -> None:
    assert seccomp.program("riscv64") is None


# -- the sandbox reads only what it needs ---------------------------------------------------------------
def test_the_sandbox_root_is_built_from_nothing_and_hides_secrets(tmp_path: Path) -> None:
    side, scratch = tmp_path / "tree", tmp_path / "scratch"
    side.mkdir()
    scratch.mkdir()
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    spec = sandbox.SandboxSpec(side, scratch, hide=(project / ".git",), expose=(project,))
    cmd = sandbox.command(spec, ["python"], 9, 10)
    pairs = list(zip(cmd, cmd[1:]))
    assert ("--tmpfs", "/") in pairs and ("--ro-bind", "/") not in pairs  # no host root
    assert ("--ro-bind", str(project)) in pairs and ("--tmpfs", str(project / ".git")) in pairs
    assert ("--seccomp", "10") in pairs and "--size" in cmd
    assert not any(a == "--ro-bind" and b in ("/root", "/home", "/work") for a, b in pairs)
    if Path("/etc/shadow").exists():
        assert cmd[cmd.index("/etc/shadow") - 1] == "/dev/null"
    if sandbox.privileged():
        assert "setpriv" in cmd and f"--reuid={sandbox.UNPRIVILEGED}" in cmd  # the worker runs as nobody
    else:
        assert "--unshare-user" in cmd


# -- hidden memory ---------------------------------------------------------------------------------------
def test_the_sampler_keeps_the_largest_reading_and_stops() -> None:
    readings = iter([10.0, 500.0, 20.0])
    sampler = cgroup.Sampler(lambda: next(readings, 5.0), period_s=3600)
    sampler.sample()
    sampler.sample()
    sampler.sample()
    assert sampler.stop_thread() == 500.0
    assert sampler.sample() == 500.0 and sampler.samples == 4  # no reading once stopped


def test_fallback_memory_counts_memfd_files(tmp_path: Path) -> None:
    fd = os.memfd_create("hidden")
    try:
        os.write(fd, b"x" * (8 << 20))
        held = cgroup.proc_memory_mb([os.getpid()], [])
    finally:
        os.close(fd)
    assert held >= 8


def test_task_states_reads_this_process_as_running_or_sleeping() -> None:
    states = cgroup.task_states([os.getpid()])
    assert states and set(states.values()) <= set("RSD")



def test_the_no_cgroup_switch_opens_no_group_and_says_so(monkeypatch) -> None:
    """DIT_AR_NO_CGROUP makes every hierarchy unavailable (the fallback the e2e attack tests judge); "0" or
    unset leaves the machine's own answer."""
    monkeypatch.setenv(cgroup.DISABLE_VARIABLE, "1")
    assert cgroup.disabled() and cgroup.open_group("unit") is None
    assert cgroup._v2_root() is None and cgroup._v1("freezer") is None and "switched off" in cgroup.describe()
    monkeypatch.setenv(cgroup.DISABLE_VARIABLE, "0")
    assert not cgroup.disabled() and "switched off" not in cgroup.describe()

# -- the static pre-gate -----------------------------------------------------------------------------
HOSTILE = '''
import signal, threading
from time import perf_counter as pc
import ctypes
def f(p):
    signal.signal(signal.SIGCONT, lambda *a: None)
    threading.Thread(target=f).start()
    open("/tmp/dit-ar/scratch/out", "w")
    open("/work/planted", "w").write("a")
    open(p).read()
    t = pc()
    q = "/proc/self/clear_refs"
    ctypes.CDLL(None).syscall(39)
'''


def test_the_pregate_names_each_rule_on_the_lines_it_finds() -> None:
    found = pregate.scan_source("model_under_test/x.py", HOSTILE)
    by_line = {(f.rule, f.line) for f in found}
    assert {("signal", 6), ("concurrency", 7), ("write", 9), ("clock", 11), ("proc", 12), ("native", 13)} <= by_line
    assert ("write", 8) not in by_line and ("write", 10) not in by_line  # the scratch and a read are fine
    assert pregate.flag(found).startswith("pregate=") and "clock" in pregate.summary(found)


def test_the_pregate_reports_only_what_the_diff_adds() -> None:
    old = "import time\nx = time.time()\n"
    new = old + "y = time.perf_counter()\n"
    found = pregate.scan_diff({"model_under_test/m.py": (old, new), "model_under_test/notes.txt": (None, "")})
    assert [(f.rule, f.line) for f in found] == [("clock", 3)]
    assert pregate.scan_diff({"model_under_test/m.py": (new, new)}) == []


PATCHES = """
import torch, sys
import torch.cuda as tc
from pytest_dit_ar.worker import server
torch.cuda.synchronize = lambda *a, **k: None
tc.is_initialized = lambda: False
setattr(torch._C, "_cuda_synchronize", print)
sys.modules["x"] = None
model = torch.nn.Linear(2, 2)
model.weight = None
"""


def test_the_pregate_flags_patches_of_the_runtime_and_imports_of_the_harness() -> None:
    """Monkeypatching torch, sys or builtins (e.g. the device-wide sync the worker replies after) and importing
    the harness are `patching` findings; an attribute of the candidate's own objects is not."""
    found = {(f.rule, f.line) for f in pregate.scan_source("model_under_test/x.py", PATCHES)}
    assert {("patching", 4), ("patching", 5), ("patching", 6), ("patching", 7)} <= found
    assert ("patching", 10) not in found and ("patching", 8) not in found  # a subscript write, a module's field


def test_the_pregate_records_unparsable_files() -> None:
    assert [f.rule for f in pregate.scan_source("m.py", "def (:\n")] == ["syntax"]


# -- post-run checks before any refusal ---------------------------------------------------------------------
def test_post_run_problems_turn_a_refusal_into_a_recorded_scope_discard(monkeypatch) -> None:
    from dit_ar_contract.status import Status
    from pytest_dit_ar.loop.experiment import Experiment
    from pytest_dit_ar.loop.guards.checks import RunDamage

    class Guard:  # RunGuard's query and repair, without a session
        damage = RunDamage()

        def problems(self) -> RunDamage:
            return self.damage

        def repair(self, damage: RunDamage) -> None:
            pass

    exp = Experiment(Path("config.json"), None, "exact", "x", sandboxed=False)
    exp.evidence = object()  # the candidate ran
    exp.guard = Guard()
    concluded = []
    monkeypatch.setattr(exp, "conclude", lambda verdict: concluded.append(verdict) or verdict)
    assert exp.guard_before_refusal() is None and concluded == []  # nothing changed: the refusal stands
    exp.guard.damage = RunDamage(("site-packages: planted.pth added",))
    verdict = exp.guard_before_refusal()
    assert verdict is not None and verdict.status is Status.DISCARD_SCOPE and concluded == [verdict]


def test_vram_is_the_peak_of_the_samples_not_the_last_reading(tmp_path: Path) -> None:
    from dit_ar_contract.device import DeviceIdentity, LaneTarget

    target = LaneTarget(lane="x", lane_id="x", device="cuda:0", identity=DeviceIdentity(kind="cuda"), on_target=False)
    worker = client.WorkerProcess("cand", tmp_path, target, 1, tmp_path / "cand.log")
    readings = iter([1000.0, 9000.0, 1200.0])  # memory freed before the end of the segment
    worker.memory.gpu = cgroup.Sampler(lambda: next(readings, 1100.0), period_s=3600)
    worker.memory.gpu.sample()
    worker.memory.gpu.sample()
    assert worker.gpu_memory_mb() == 9000.0


def test_the_hosts_tmp_is_never_bound_into_the_sandbox(tmp_path: Path) -> None:
    spec = sandbox.SandboxSpec(tmp_path, tmp_path, expose=(Path("/tmp"), Path("/")))
    cmd = sandbox.command(spec, ["python"], 9)
    pairs = list(zip(cmd, cmd[1:]))
    assert ("/tmp", "/tmp") not in pairs and ("/", "/") not in pairs
