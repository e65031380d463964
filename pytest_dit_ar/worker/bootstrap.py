"""The prelude of a worker's command line: the folders it imports the harness and its libraries from.

The worker runs isolated (`python -I`: no current folder, no PYTHONPATH, no user site on sys.path), so neither
side can import harness code from its own tree; `BOOTSTRAP` puts exactly the harness's folders first, read from
the `PATH_VARIABLE` the launcher sets (`worker_sys_path`), then runs the fork server's main (worker/zygote.py):
every worker process, exec'd or forked, starts from this one command line.
"""

from __future__ import annotations

import sys
from pathlib import Path

HARNESS_ROOT = Path(__file__).resolve().parents[2]  # the folder holding dit_ar_contract/ and pytest_dit_ar/
PATH_VARIABLE = "DIT_AR_WORKER_PATH"
BOOTSTRAP = ("import os, sys; sys.path[:0] = os.environ.pop('" + PATH_VARIABLE + "').split(os.pathsep); "
             "from pytest_dit_ar.worker.zygote import main; sys.exit(main())")


def worker_sys_path(root: Path, hidden: tuple[Path, ...] | None = None) -> list[str]:
    """The harness folder, then the folders this process imports its libraries from, minus the current folder and
    anything inside a side's tree (a best worktree holds an old copy of the harness). A sandboxed worker's list
    (`hidden`: what its sandbox hides, the state folder holding every side's worktree among them) leaves out what
    lies in a hidden folder, the same for every side: the list is in the worker's environment and its folders
    are bound into its sandbox, so it must not depend on which tree the worker runs."""
    outside = [root.resolve()] if hidden is None else [h.resolve() for h in hidden]
    paths = [str(HARNESS_ROOT)]
    for entry in sys.path:
        if not entry or not Path(entry).is_dir():
            continue
        resolved = Path(entry).resolve()
        if resolved == HARNESS_ROOT or not any(resolved == o or o in resolved.parents for o in outside):
            paths.append(str(resolved))
    return list(dict.fromkeys(paths))
