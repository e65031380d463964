"""`python -m pytest_dit_ar.cli ...` is `dit-ar ...`."""

import sys

from .main import entry

sys.exit(entry())
