"""A candidate's attempt to tell its side and its phase by every channel known (tests/e2e/test_role_chain.py).

`ORACLE` is the source of `model_under_test/oracle.py`: `thinks_best()` and `thinks_timed()` try each channel and
`report()` writes one line `ORACLE <json>` to stderr with what each said, so that the test can hold the harness to
it. Channels (docs/design/sandbox-and-security.md, "What a worker can see"):

* the descriptors' targets: the role-named log (`worker-best-segment1.log`) a worker's stderr once was;
* mountinfo and the sandbox's command line (/proc/1/cmdline): the host paths bound (a best worktree, the state
  folder's compile cache bound for a tree's first worker);
* the cgroup's path (`best-...`, `candidate-fork-...` once); the environment; the process's command line (a forked
  worker once ran the fork server's, an exec'd one the server's);
* the compile cache: a marker an earlier worker of the same tree left there (so this is not the tree's first
  worker: once, the judged quality run was);
* the sandbox's history (RESIDUAL: a fork server's children share it): a marker another process left in the
  sandbox's /tmp tells a fork server's later child; the docs name it (and its PIDs, which count the same).
"""

from __future__ import annotations

ORACLE = r'''
"""What this worker guesses of its side and phase (tests/helpers/oracles.py)."""
import json, os, sys

CACHE = "/tmp/dit-ar/cache"
_SEEN = {}


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _fd_targets():
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink("/proc/self/fd/" + fd))
        except OSError:
            pass
    return " ".join(out)


_ME = os.urandom(8).hex()  # this process (PIDs repeat: every worker's serving process has the same one)


def _marker(folder, name):
    """Whether another process left `name`-* in `folder`; leave this one's."""
    try:
        others = [n for n in os.listdir(folder) if n.startswith(name) and n != name + _ME]
        with open(os.path.join(folder, name + _ME), "w") as f:
            f.write("x")
        return bool(others)
    except OSError:
        return False


def channels():
    if _SEEN:
        return _SEEN
    fds, mounts = _fd_targets(), _read("/proc/self/mountinfo") + _read("/proc/1/cmdline")
    cgroup, environ, cmdline = _read("/proc/self/cgroup"), _read("/proc/self/environ"), _read("/proc/self/cmdline")
    _SEEN.update({
        "best": {"fd": "worker-best" in fds or "forkserver-best" in fds or "-block0" in fds,
                 "mounts": "/worktrees/best" in mounts, "cgroup": "/best-" in cgroup,
                 "environ": "/worktrees/best" in environ, "cmdline": "/worktrees/best" in cmdline},
        "timed": {"fd": "-segment" in fds, "cgroup": "-fork-" in cgroup, "cmdline": "worker.zygote" in cmdline,
                  "cache": _marker(CACHE, "oracle-"), "sandbox-history": _marker("/tmp", "oracle-")},
        "judged": {"mounts": "/compile-cache/" in mounts, "fd": "-quality" in fds},
    })
    return _SEEN


def thinks_best():
    return any(channels()["best"].values())


def thinks_timed():
    seen = channels()
    return any(seen["timed"].values()) and not any(seen["judged"].values())


def report():
    seen = channels()
    sys.stderr.write("ORACLE " + json.dumps({"best": thinks_best(), "timed": thinks_timed(), **seen}) + "\n")
    sys.stderr.flush()
'''

RESIDUAL = ("sandbox-history",)  # channels the docs name as open (a fork server's children share a sandbox)


def reports(log_text: str) -> list[dict]:
    import json

    return [json.loads(line[len("ORACLE "):]) for line in log_text.splitlines() if line.startswith("ORACLE ")]
