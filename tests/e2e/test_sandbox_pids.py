"""The sandbox's own processes as the harness reads them from the kernel (bubblewrap, no worker, no GPU)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time


def test_an_exec_d_worker_is_not_its_own_helper_but_what_it_starts_is() -> None:
    """The H200's eager run (wave 8) waited up to 0.25 s before every timed side of the quality run's pair:
    the exec'd worker's own Python process was taken for a helper with a CUDA context of its own. The worker
    and the sandbox's init are PID 2 and 1 inside the namespace; what the worker starts is neither."""
    assert shutil.which("bwrap"), "bubblewrap is missing: install it as the README says (apt-get install bubblewrap)"
    from pytest_dit_ar.worker.sandbox import Namespace

    r, w = os.pipe()
    proc = subprocess.Popen(["bwrap", "--unshare-pid", "--dev-bind", "/", "/", "--die-with-parent",
                             "--info-fd", str(w), "sh", "-c", "sleep 20 & exec sleep 20"], pass_fds=(w,))
    os.close(w)
    try:
        ns = Namespace.read(r, timeout_s=10)
        deadline = time.monotonic() + 5
        while len(ns.pids()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        pids = ns.pids()
        own = ns.own_pids(pids)
        assert len(pids) == 3 and len(own) == 2 and ns.init_pid in own
        (helper,) = set(pids) - own
        assert open(f"/proc/{helper}/status").read().count("sleep") >= 1
    finally:
        proc.kill()
        proc.wait()
        os.close(r)
