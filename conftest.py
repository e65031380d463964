"""Root wiring for pytest: the mutable package is judged by the suites, never collected as tests.

In pytest-xdist processes (`pytest tests/unit lab/tests -n 2`, one per core) every library computes with one thread.
torch and numpy's OpenBLAS read OMP_NUM_THREADS once, when they are first imported, and the first conftest that
imports numpy (`tests/conftest.py`) is read after this file: two processes of two threads each on two cores wait on
each other's threads instead of computing (an OpenBLAS thread waiting for work spins: numpy's 64 x 64 eigenvalues
cost 15 times the CPU with two threads as with one on this project's 2-core VM under load). A run without xdist
keeps the libraries' default."""

import os

collect_ignore = ["model_under_test"]

if os.environ.get("PYTEST_XDIST_WORKER"):  # set by xdist before a worker reads any conftest
    os.environ.setdefault("OMP_NUM_THREADS", "1")
