"""Cost of a freeze with the cgroup freezer and with the SIGSTOP fallback (docs/design/sandbox-and-security.md):
an idle process, and one whose two threads loop on 512 MiB preadv calls (in-kernel work a freeze must wait out).

Run from the repository root, as a user who can write the cgroup tree (root): python -m lab.tools.freeze_cost
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import time

from pytest_dit_ar.worker import cgroup

KERNEL_WORK = """
import os, threading, time
fd = os.memfd_create('x'); os.ftruncate(fd, 512 << 20)
def spin():
    buf = bytearray(512 << 20)
    while True:
        os.preadv(fd, [buf], 0)
for _ in range(2):
    threading.Thread(target=spin, daemon=True).start()
time.sleep(600)
"""


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1e3:.3f} ms, max {max(values) * 1e3:.3f} ms (n={len(values)})"


def with_cgroup(code: str, n: int) -> str:
    group = cgroup.open_group("freeze-cost")
    if group is None or group.freezer is None:
        return "no writable cgroup freezer here"
    child = subprocess.Popen([sys.executable, "-c", code], preexec_fn=group.enter)
    time.sleep(2)
    waits = []
    for _ in range(n):
        waits.append(group.freeze())
        time.sleep(0.05)
        group.thaw()
        time.sleep(0.05)
    child.kill()
    child.wait()
    group.remove()
    return ms(waits)


def with_sigstop(code: str, n: int) -> str:
    child = subprocess.Popen([sys.executable, "-c", code])
    time.sleep(2)
    waits = []
    for _ in range(n):
        child.send_signal(signal.SIGSTOP)
        waits.append(cgroup.wait_stopped(lambda: [child.pid]))
        child.send_signal(signal.SIGCONT)
        time.sleep(0.05)
    child.kill()
    child.wait()
    return ms(waits)


if __name__ == "__main__":
    idle = "import time; time.sleep(600)"
    print("hierarchies:", cgroup.describe())
    print("cgroup freezer, idle process:", with_cgroup(idle, 50))
    print("cgroup freezer, in-kernel preadv loops:", with_cgroup(KERNEL_WORK, 20))
    print("SIGSTOP + /proc wait, idle process:", with_sigstop(idle, 50))
    print("SIGSTOP + /proc wait, in-kernel preadv loops:", with_sigstop(KERNEL_WORK, 20))
