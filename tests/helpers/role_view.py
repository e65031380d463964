"""What a sandboxed worker can see of itself, and a comparison of two such views that knows which values are random
or per worker (tests/unit/test_role_views.py, tests/e2e/test_role_views.py).

`PROBE` is the source of a module a test puts into a tree's model_under_test/ (`role_view.py`): its `dump()` writes
one line `ROLE-VIEW <json>` to stderr (the harness relays it into the worker's log) with every channel the audit in
docs/design/sandbox-and-security.md lists: the descriptors and where they point, the mounts, the cgroup, the
environment, the command line, the folder it runs in, the process's ids and limits, the files of its tree, cache,
scratch and private folders with their times, the modules it has imported. `normalise` replaces the values named in
`PER_WORKER` by placeholders; two workers whose normalised views are equal cannot be told apart by any of them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

MARK = "ROLE-VIEW "

PROBE = r'''
"""A probe: what this process can see of itself (tests/helpers/role_view.py)."""
import json, os, resource, sys

SIDE, CACHE, SCRATCH = "/tmp/dit-ar/side", "/tmp/dit-ar/cache", "/tmp/dit-ar/scratch"
STATUS = ("Name", "Umask", "PPid", "TracerPid", "Uid", "Gid", "Groups", "NSpgid", "NSsid", "Threads", "SigBlk",
          "SigIgn", "SigCgt", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp",
          "Seccomp_filters", "Cpus_allowed_list", "Mems_allowed_list", "Pid", "NSpid", "Tgid", "NStgid")


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError as exc:
        return "<%s>" % type(exc).__name__


def _listing(top, times=True):
    out = []
    if not os.path.isdir(top):
        return out
    for dirpath, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not os.path.ismount(os.path.join(dirpath, d)))  # its own files only
        for name in [dirpath] + [os.path.join(dirpath, n) for n in sorted(dirs + files)]:
            try:
                st = os.lstat(name)
            except OSError:
                continue
            row = {"path": os.path.relpath(name, top), "mode": oct(st.st_mode), "uid": st.st_uid, "gid": st.st_gid,
                   "size": st.st_size if not os.path.isdir(name) else 0, "nlink": st.st_nlink, "ino": st.st_ino,
                   "ctime": st.st_ctime_ns, "atime": st.st_atime_ns}
            if times:
                row["mtime"] = st.st_mtime_ns
            out.append(row)
    return out


def _fds():
    fds = {}
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError as exc:
            target = "<%s>" % type(exc).__name__
        info = dict(line.split(":", 1) for line in _read("/proc/self/fdinfo/" + fd).splitlines() if ":" in line)
        fds[fd] = {"target": target, **{k: v.strip() for k, v in info.items()}}
    return fds


def view():
    status = dict(line.split(":", 1) for line in _read("/proc/self/status").splitlines() if ":" in line)
    namespaces = {}
    for name in sorted(os.listdir("/proc/self/ns")):
        try:
            namespaces[name] = os.readlink("/proc/self/ns/" + name)
        except OSError as exc:
            namespaces[name] = "<%s>" % type(exc).__name__
    procs = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            procs[pid] = _read("/proc/%s/cmdline" % pid)
    return {
        "fd": _fds(),
        "mountinfo": _read("/proc/self/mountinfo"), "mounts": _read("/proc/self/mounts"),
        "cgroup": _read("/proc/self/cgroup"), "environ": sorted(_read("/proc/self/environ").split("\0")),
        "os.environ": dict(os.environ), "cmdline": _read("/proc/self/cmdline"), "sys.argv": list(sys.argv),
        "cwd": os.getcwd(), "status": {k: status.get(k, "").strip() for k in STATUS},
        "ids": {"pid": os.getpid(), "ppid": os.getppid(), "pgrp": os.getpgrp(), "sid": os.getsid(0),
                "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups()},
        "limits": _read("/proc/self/limits"),
        "rlimits": {n: list(resource.getrlimit(getattr(resource, n))) for n in sorted(dir(resource))
                    if n.startswith("RLIMIT_")},
        "uname": list(os.uname()), "namespaces": namespaces, "procs": procs,
        "oom_score_adj": _read("/proc/self/oom_score_adj"), "loginuid": _read("/proc/self/loginuid"),
        "personality": _read("/proc/self/personality"), "timerslack_ns": _read("/proc/self/timerslack_ns"),
        "autogroup": _read("/proc/self/autogroup"), "affinity": sorted(os.sched_getaffinity(0)),
        "sys.path": list(sys.path), "sys.flags": repr(sys.flags), "modules": sorted(sys.modules),
        "tree": _listing(SIDE), "cache": _listing(CACHE, times=False), "scratch": _listing(SCRATCH, times=False),
        "tmp": [r for r in _listing("/tmp", times=False) if not r["path"].startswith("dit-ar")],
        "dev/shm": _listing("/dev/shm", times=False), "ls /": sorted(os.listdir("/")),
    }


def dump():
    sys.stderr.write("ROLE-VIEW " + json.dumps(view(), sort_keys=True) + "\n")
    sys.stderr.flush()
'''

# The values that differ from worker to worker whatever its role, by design: each is random, or counts or times
# something of this worker's own, never its side or phase. `normalise` replaces each by a placeholder.
PER_WORKER = {
    "pipe and socket inodes": "the kernel's inode number of each pipe and socket (fd targets and fdinfo `ino`)",
    "mount ids": "the kernel's id of each mount and of its parent (mountinfo's first two fields), and the anonymous "
                 "device number of each of the sandbox's own tmpfs, proc and cgroup mounts (`0:NN`)",
    "staging folder": "the random name of the worker's staging folder (`/tmp/dit-ar-XXXXXXXX`, mkdtemp)",
    "cgroup name": "the random name of the worker's cgroup (`w-` and 12 hex digits)",
    "namespace inodes": "the inode numbers of the worker's namespaces (/proc/self/ns/*)",
    "pids": "the worker's PID in its sandbox and its fork server's other processes (they count the processes "
            "its sandbox started before it: a fork server's later child has a larger one)",
    "autogroup": "the scheduler's autogroup number of the worker's session (a counter of the machine's sessions)",
    "inodes and change times": "the inode number, change and access times of each file the worker sees (every "
                               "staged copy is new; modification times are the fixed STAGED_TIME)",
    "cache content": "what the tree's compile cache holds when the worker starts: empty (or the best's copy) for "
                     "the tree's first worker, what its first worker compiled for the later ones",
}
STAGE = re.compile(r"/tmp/dit-ar-[A-Za-z0-9_]{8}")
INODE = re.compile(r"(pipe|socket|anon_inode:\[?[a-z]*\]?):\[\d+\]")
GROUP = re.compile(r"w-[0-9a-f]{12}")
NS_INODE = re.compile(r"^([a-z_]+):\[\d+\]$")
ROW_PER_WORKER = ("ino", "ctime", "atime")
STATUS_PIDS = ("Pid", "NSpid", "Tgid", "NStgid")


def parse_log(path: Path) -> dict[str, Any] | None:
    """The view a probe wrote into a worker's log (the last one), None when there is none."""
    found = None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith(MARK):
            found = json.loads(line[len(MARK):])
    return found


def _text(value: str) -> str:
    return GROUP.sub("w-*", STAGE.sub("/tmp/dit-ar-*", INODE.sub(r"\1:[*]", value)))


def _mounts(text: str) -> list[str]:
    """mountinfo's lines without the mount ids (the first two fields) and anonymous device numbers."""
    return [re.sub(r"^0:\d+ ", "0:* ", _text(" ".join(line.split()[2:]))) for line in text.splitlines()]


def normalise(view: dict[str, Any]) -> dict[str, Any]:
    """The view with every PER_WORKER value replaced by a placeholder."""
    v = json.loads(json.dumps(view))
    for fd in v["fd"].values():
        fd["target"] = _text(fd["target"])
        fd.pop("ino", None)
        fd.pop("pos", None)
    v["mountinfo"] = _mounts(v["mountinfo"])
    v["mounts"] = [_text(line) for line in v["mounts"].splitlines()]
    v["cgroup"] = _text(v["cgroup"])
    v["namespaces"] = {k: NS_INODE.sub(r"\1:[*]", x) for k, x in v["namespaces"].items()}
    v["ids"] = {k: x for k, x in v["ids"].items() if k != "pid"}
    v["status"] = {k: x for k, x in v["status"].items() if k not in STATUS_PIDS}
    v["procs"] = sorted(_text(c) for c in v["procs"].values())
    v["autogroup"] = re.sub(r"autogroup-\d+", "autogroup-*", v["autogroup"])
    for key in ("tree", "cache", "scratch", "tmp", "dev/shm"):
        v[key] = [{k: x for k, x in row.items() if k not in ROW_PER_WORKER} for row in v[key]]
    return v


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What tells two normalised views apart, key by key (empty: nothing does)."""
    found = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            found.append(f"{key}: {_short(a.get(key))} != {_short(b.get(key))}")
    return found


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) < 400 else text[:400] + "..."
