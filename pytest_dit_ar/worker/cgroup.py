"""One control group per worker: a freeze that waits for in-kernel work, and memory the candidate cannot hide.

* **Freeze.** The cgroup freezer (v2 `cgroup.freeze`, else v1 `freezer.state`) stops every task of the
  group and reports *frozen* only once each task has left the kernel: a thread in the middle of a huge
  `pread` freezes when the call returns, and the harness waits for that before it times the other side.
  No signal is delivered, so a worker cannot catch the freeze (a SIGCONT handler sees nothing). Without a
  writable freezer the harness falls back to SIGSTOP and then waits until `/proc/<pid>/task/*/stat` shows
  every task stopped (state T): the same wait, but the stop and continue are signals a worker can observe.
* **Memory.** The group's own counters (v2 `memory.peak`/`memory.stat`, v1 `memory.max_usage_in_bytes`/
  `memory.stat`) charge everything the group's tasks allocate, tmpfs files (`/tmp`, `/dev/shm` of the
  sandbox) and memfds included; they are written by the kernel and hidden from the sandbox (its /sys has no
  cgroup tree), so `/proc/self/clear_refs` or freeing memory before a reading changes nothing. The harness
  samples anonymous + shared memory while the worker lives (`Sampler`) and also reads the kernel's peak.
* **A hard memory limit.** `open_group(label, memory_max_mb)` sets the group's limit (v2 `memory.max`, no swap,
  `memory.oom.group` so the whole sandbox goes; v1 `memory.limit_in_bytes`): beyond it the kernel kills the
  worker, and nothing outside its group (the other side, another session's judging on the node) loses a page.
  `oom_note` names such a kill from the kernel's own counter (v2 `memory.events`, v1 `memory.oom_control`:
  `oom_kill`), so the worker's death is recorded as the candidate's CRASH, out of memory. Without a memory group
  the child limits itself before exec (`limit_rlimit`: RLIMIT_DATA, per process; worker/host_limit.py says what
  that leaves out).

`open_group` returns None where no writable hierarchy exists (an unprivileged harness without delegation):
then `proc_memory_mb` sums resident and shared memory from /proc, the sandbox's tmpfs use, and the memfds the
worker holds, sampled the same way.

`DIT_AR_NO_CGROUP=1` in the harness's environment (never the worker's: it is read here, in the harness
process) makes every hierarchy count as unavailable, so that the fallback runs on a machine that has cgroups:
the end-to-end attack tests use it to judge the fallback itself (docs/design/sandbox-and-security.md).
"""

from __future__ import annotations

import os
import resource
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
FREEZE_TIMEOUT_S = 30.0
DISABLE_VARIABLE = "DIT_AR_NO_CGROUP"  # set (non-empty, not "0"): behave as if no cgroup were writable
PARENT_VARIABLE = "DIT_AR_CGROUP_PARENT"  # a fleet judging's group (open_judging): workers' groups go inside it


def disabled() -> bool:
    """Whether the harness was told to use the no-cgroup fallback (`DIT_AR_NO_CGROUP`)."""
    return os.environ.get(DISABLE_VARIABLE, "") not in ("", "0")


class FreezeTimeout(RuntimeError):
    """A side's tasks did not all stop in time (work that would run on while the other side is timed)."""


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


def _v2_root() -> Path | None:
    if disabled():
        return None
    for candidate in (ROOT, ROOT / "unified"):
        if (candidate / "cgroup.procs").exists() and (candidate / "cgroup.subtree_control").exists() and \
                _writable_dir(candidate):
            return candidate
    return None


def _v1(controller: str) -> Path | None:
    if disabled():
        return None
    path = ROOT / controller
    return path if (path / "tasks").exists() and _writable_dir(path) else None


@dataclass
class Group:
    """The cgroup directories of one worker (one per hierarchy in use) and what each provides."""

    name: str
    freezer: Path | None = None  # v2 group (cgroup.freeze) or v1 freezer group
    freezer_v2: bool = True
    memory: Path | None = None
    memory_v2: bool = True
    dirs: list[Path] = field(default_factory=list)
    limit_mb: float | None = None  # the hard memory limit the kernel enforces on the group (None: none)

    def procs_files(self) -> list[str]:
        """The cgroup.procs files a new process writes its PID to (from preexec_fn, before exec)."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def enter(self) -> bool:  # pragma: no cover - runs in the child before exec
        """Join the group; whether every write went through (the parent also checks the PID is in the group)."""
        pid = str(os.getpid()).encode()
        joined = True
        for procs in self.procs_files():
            try:
                fd = os.open(procs, os.O_WRONLY)
            except OSError:
                joined = False
                continue
            try:
                os.write(fd, pid)
            except OSError:
                joined = False
            finally:
                os.close(fd)
        return joined

    def adopt(self, pid: int) -> bool:
        """Move a running process (all its threads) into the group from outside (a fork server's child,
        which the harness did not exec); whether it is in the group now. Memory it already touched stays
        charged where it was (the fork server's prelude, shared copy-on-write)."""
        for procs in self.procs_files():
            try:
                Path(procs).write_text(str(pid))
            except OSError:
                continue
        return pid in self.pids()

    def freeze(self, timeout_s: float = FREEZE_TIMEOUT_S) -> float:
        """Freeze and wait until the kernel says every task is frozen; returns the seconds waited."""
        assert self.freezer is not None
        t0 = time.perf_counter()
        if self.freezer_v2:
            (self.freezer / "cgroup.freeze").write_text("1")
            done = lambda: "frozen 1" in (self.freezer / "cgroup.events").read_text()  # noqa: E731
        else:
            (self.freezer / "freezer.state").write_text("FROZEN")
            done = lambda: (self.freezer / "freezer.state").read_text().strip() == "FROZEN"  # noqa: E731
        _wait(done, timeout_s, f"the tasks of {self.name} did not reach frozen within {timeout_s:.0f} s")
        return time.perf_counter() - t0

    def thaw(self) -> None:
        assert self.freezer is not None
        if self.freezer_v2:
            (self.freezer / "cgroup.freeze").write_text("0")
        else:
            (self.freezer / "freezer.state").write_text("THAWED")

    # -- memory ---------------------------------------------------------------------------------
    def stat(self) -> dict[str, int]:
        if self.memory is None:
            return {}
        out = {}
        for line in (self.memory / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                out[key] = int(value)
        return out

    def held_mb(self) -> float | None:
        """Anonymous plus shared (tmpfs, /dev/shm, memfd) memory charged to the group now."""
        if self.memory is None:
            return None
        stat = self.stat()
        if self.memory_v2:
            return (stat.get("anon", 0) + stat.get("shmem", 0)) / 2**20
        return (stat.get("rss", 0) + stat.get("shmem", 0)) / 2**20

    def kernel_peak_mb(self) -> float | None:
        """The kernel's own high-water mark of everything charged (page cache included)."""
        if self.memory is None:
            return None
        name = "memory.peak" if self.memory_v2 else "memory.max_usage_in_bytes"
        try:
            return int((self.memory / name).read_text().split()[0]) / 2**20
        except (OSError, ValueError, IndexError):
            return None

    def pids(self) -> list[int]:
        found: set[int] = set()
        for d in self.dirs:
            try:
                found |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
            except OSError:
                continue
        return sorted(found)

    def remove(self) -> None:
        """Kill what is left and remove the directories (a frozen task dies once thawed)."""
        for pid in self.pids():
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        if self.freezer is not None:
            try:
                self.thaw()
            except OSError:
                pass
        for d in reversed(self.dirs):
            _remove_dir(d)


def _remove_dir(d: Path) -> None:
    """Remove a group's folder, the groups inside it first (a judging's workers'), killing what runs in them."""
    for child in [c for c in d.iterdir() if c.is_dir()] if d.is_dir() else []:
        try:
            for pid in (child / "cgroup.procs").read_text().split():
                os.kill(int(pid), 9)
        except (OSError, ValueError):
            pass
        _remove_dir(child)
    for _ in range(50):
        try:
            d.rmdir()
            break
        except FileNotFoundError:
            break
        except OSError:
            time.sleep(0.02)


# -- a hard memory limit --------------------------------------------------------------------------------
def set_limit(group: Group, mb: float) -> bool:
    """Set the group's hard memory limit (the kernel kills a task of the group beyond it); whether it holds."""
    if group.memory is None:
        return False
    limit = str(int(mb * 2**20))
    try:
        if group.memory_v2:
            (group.memory / "memory.max").write_text(limit)
            for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                if (group.memory / name).exists():
                    (group.memory / name).write_text(value)
        else:
            (group.memory / "memory.limit_in_bytes").write_text(limit)
            if (group.memory / "memory.memsw.limit_in_bytes").exists():  # swap accounting on: no swap either
                (group.memory / "memory.memsw.limit_in_bytes").write_text(limit)
    except OSError:
        return False
    group.limit_mb = mb
    return True


def oom_kills(group: Group) -> int:
    """How many of the group's tasks the kernel killed at its memory limit (its own counter)."""
    if group.memory is None:
        return 0
    try:
        text = (group.memory / ("memory.events" if group.memory_v2 else "memory.oom_control")).read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def oom_note(group: Group | None) -> str:
    """What a worker's death was, when the kernel killed it at its group's memory limit, or at its fleet judging's
    (the limit of all the judging's workers together), ("" otherwise)."""
    kills = oom_kills(group) if group is not None else 0
    if not kills:
        return ""
    assert group is not None and group.memory is not None
    judging = _limit_mb(group.memory.parent, group.memory_v2) if group.memory.parent.name != "dit-ar" else None
    also = f"its judging's workers: {judging:.0f} MiB together; " if judging else ""
    return (f"out of memory: the kernel killed it at its memory limit of {group.limit_mb or 0:.0f} MiB ({also}"
            f"{'memory.events' if group.memory_v2 else 'memory.oom_control'} oom_kill {kills})")


def _limit_mb(folder: Path, v2: bool) -> float | None:
    try:
        value = (folder / ("memory.max" if v2 else "memory.limit_in_bytes")).read_text().strip()
    except OSError:
        return None
    return int(value) / 2**20 if value.isdigit() and int(value) < 1 << 60 else None


def _wait(done, timeout_s: float, message: str) -> None:
    deadline = time.monotonic() + timeout_s
    pause = 0.0005
    while not done():
        if time.monotonic() > deadline:
            raise FreezeTimeout(message)
        time.sleep(pause)
        pause = min(pause * 2, 0.01)


def _base(parent: Path) -> Path:
    """Where a worker's group is made in the hierarchy at `parent`: `dit-ar/`, or inside the fleet judging's group
    the harness runs for (PARENT_VARIABLE), where that hierarchy has it."""
    base = parent / "dit-ar"
    judging = os.environ.get(PARENT_VARIABLE, "")
    return base / judging if judging and (base / judging).is_dir() else base


def _make(parent: Path, name: str) -> Path | None:
    try:
        (parent / "dit-ar").mkdir(exist_ok=True)
        path = _base(parent) / name
        path.mkdir()
        return path
    except OSError:
        return None


def _v2_memory_ready(v2: Path) -> bool:
    """Whether a child of v2/dit-ar (or of the judging's group in it) gets the memory controller (enabled down the
    tree where allowed)."""
    try:
        if "memory" not in (v2 / "cgroup.controllers").read_text().split():
            return False
        for level in dict.fromkeys((v2, v2 / "dit-ar", _base(v2))):
            if "memory" not in (level / "cgroup.subtree_control").read_text().split():
                (level / "cgroup.subtree_control").write_text("+memory")
        return True
    except OSError:
        return False


def open_judging(label: str, memory_max_mb: float) -> Group | None:
    """A fleet judging's group: the groups of its workers are made inside it (its name in PARENT_VARIABLE, in the
    verb's environment), and its memory limit holds them all together. None where no memory controller is
    writable (each worker's own limit still holds)."""
    group = Group(f"{label}-{secrets.token_hex(6)}")
    v2 = _v2_root()
    if v2 is not None and _v2_memory_ready(v2):
        group.memory = _make(v2, group.name)
    elif _v1("memory") is not None:
        group.memory, group.memory_v2 = _make(ROOT / "memory", group.name), False
    if group.memory is not None:
        group.dirs.append(group.memory)
    if group.memory is None or not set_limit(group, memory_max_mb):
        group.remove()
        return None
    return group


def open_group(label: str, memory_max_mb: float | None = None) -> Group | None:
    """A new cgroup for one worker, in whatever writable hierarchies this machine has, its memory limited to
    `memory_max_mb` where a memory controller is writable; None without any."""
    group = _open(label)
    if group is not None and memory_max_mb:
        set_limit(group, memory_max_mb)
    return group


def limit_rlimit(group: Group | None, joined: bool, memory_max_mb: float | None) -> None:  # pragma: no cover
    """In the child before exec: where its group does not hold the memory limit (no memory controller, or joining
    failed), RLIMIT_DATA does, per process (resource is imported at the top: nothing is imported in the child)."""
    if not memory_max_mb or (group is not None and joined and group.limit_mb is not None):
        return
    limit = int(memory_max_mb * 2**20)
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    except (OSError, ValueError):
        pass


def _open(label: str) -> Group | None:
    name = f"{label}-{secrets.token_hex(6)}"
    group = Group(name)
    v2 = _v2_root()
    if v2 is not None:
        path = _make(v2, name)
        if path is not None:
            group.dirs.append(path)
            group.freezer = path if (path / "cgroup.freeze").exists() else None
            if _v2_memory_ready(v2) and (path / "memory.stat").exists():
                group.memory = path
    if group.freezer is None and _v1("freezer") is not None:
        path = _make(ROOT / "freezer", name)
        if path is not None:
            group.dirs.append(path)
            group.freezer, group.freezer_v2 = path, False
    if group.memory is None and _v1("memory") is not None:
        path = _make(ROOT / "memory", name)
        if path is not None:
            group.dirs.append(path)
            group.memory, group.memory_v2 = path, False
    if not group.dirs:
        return None
    return group


def describe() -> str:
    """What this machine offers (for `dit-ar doctor` and the docs)."""
    if disabled():
        return f"cgroups switched off ({DISABLE_VARIABLE} is set)"
    v2 = _v2_root()
    parts = [f"cgroup v2 at {v2}" if v2 else "no writable cgroup v2"]
    parts += [f"v1 {c}" for c in ("freezer", "memory") if _v1(c)]
    return ", ".join(parts)


def memory_limit_kind() -> str:
    """Which mechanism holds a worker's hard memory limit here: a memory cgroup's, else RLIMIT_DATA (probed by
    making a group and setting a limit on it)."""
    group = _open("probe")
    try:
        if group is not None and set_limit(group, 1 << 20):
            return "cgroup v2 memory.max" if group.memory_v2 else \
                "cgroup v1 memory.limit_in_bytes (no cgroup v2 memory controller delegated here)"
    finally:
        if group is not None:
            group.remove()
    return "RLIMIT_DATA"


# -- without a cgroup: /proc -------------------------------------------------------------------------
def task_states(pids: list[int]) -> dict[int, str]:
    """State letter of every thread of `pids` (R running, S sleeping, D in the kernel, T stopped, ...)."""
    states = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            except OSError:
                continue
            states[int(tid)] = stat.rsplit(")", 1)[1].split()[0]
    return states


def wait_stopped(pids_now, timeout_s: float = FREEZE_TIMEOUT_S) -> float:
    """After SIGSTOP: wait until every thread is stopped (not running, not inside a system call)."""
    t0 = time.perf_counter()
    _wait(lambda: all(s in "TtZX" for s in task_states(pids_now()).values()), timeout_s,
          f"the worker's threads did not all stop within {timeout_s:.0f} s")
    return time.perf_counter() - t0


def proc_memory_mb(pids: list[int], tmpfs_roots: list[Path]) -> float:
    """Resident + shared memory of `pids`, files in the sandbox's tmpfs mounts and memfds held (fallback)."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith(("RssAnon:", "RssShmem:")):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:"):
                    total += os.stat(f"/proc/{pid}/fd/{fd}").st_blocks * 512
            except OSError:
                continue
    for root in tmpfs_roots:
        try:
            st = os.statvfs(root)
            total += (st.f_blocks - st.f_bfree) * st.f_frsize
        except OSError:
            continue
    return total / 2**20


class Sampler:
    """Samples a quantity every `period_s` in a harness thread and keeps the largest value seen: over the whole
    life (`peak`) and since `mark_steady` (`steady`: the steady state, after warm-up and any compile)."""

    def __init__(self, read, period_s: float = 0.05):
        self.read, self.period_s = read, period_s
        self.peak: float | None = None
        self.steady: float | None = None
        self.marked = False
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dit-ar-memory-sampler", daemon=True)

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def sample(self) -> float | None:
        """Take one reading now (none once stopped) and return the peak so far."""
        if self._stop.is_set():
            return self.peak
        try:
            value = self.read()
        except Exception:  # noqa: BLE001 - a reading that fails (a worker going away) is skipped, never fatal
            return self.peak
        self.samples += 1
        if value is not None and (self.peak is None or value > self.peak):
            self.peak = value
        if value is not None and self.marked and (self.steady is None or value > self.steady):
            self.steady = value
        return self.peak

    def mark_steady(self) -> None:
        """From now on also keep the steady peak (the first reading is taken now)."""
        self.marked, self.steady = True, None
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.sample()

    def stop_thread(self) -> float | None:
        """Take a last reading, stop sampling and return the peak (kept for readers after the worker ends)."""
        self.sample()
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        return self.peak
