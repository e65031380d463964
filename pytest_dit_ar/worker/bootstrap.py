"""The prelude of a worker's command line: the folders it imports the harness and its libraries from.

The worker runs isolated (`python -I`: no current folder, no PYTHONPATH, no user site on sys.path), so neither
side can import harness code from its own tree; `BOOTSTRAP` puts exactly the harness's folders first, read from
the `PATH_VARIABLE` the launcher sets (`worker_sys_path`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import protocol

HARNESS_ROOT = Path(__file__).resolve().parents[2]  # the folder holding dit_ar_contract/ and pytest_dit_ar/
PATH_VARIABLE = "DIT_AR_WORKER_PATH"
BOOTSTRAP = ("import os, sys; sys.path[:0] = os.environ.pop('" + PATH_VARIABLE + "').split(os.pathsep); "
             "from " + protocol.SERVER_MODULE + " import main; sys.exit(main())")


def worker_sys_path(root: Path) -> list[str]:
    """The harness folder, then the folders this process imports its libraries from, minus anything inside
    the side's tree (a best worktree holds an old copy of the harness) and the current folder."""
    inside = root.resolve()
    paths = [str(HARNESS_ROOT)]
    for entry in sys.path:
        if not entry or not Path(entry).is_dir():
            continue
        resolved = Path(entry).resolve()
        if resolved == HARNESS_ROOT or (resolved != inside and inside not in resolved.parents):
            paths.append(str(resolved))
    return list(dict.fromkeys(paths))
