"""Build hook: ship the root `handbook/` and the task guides `docs/guide/` inside the package
(`pytest_dit_ar/handbook/`, `pytest_dit_ar/guides/`).

Everything else about the package is declared in pyproject.toml. Both stay where they are in the repository (the
README, program.md, SKILL.md and the tests point there: one source of truth); an installed wheel needs its own copy
for `dit-ar search` (pytest_dit_ar/search/location.py looks for it) and `dit-ar guide` (pytest_dit_ar/cli/guide.py).
An editable install reads the repository's folders instead.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
COPIES = {ROOT / "handbook": "handbook", ROOT / "docs" / "guide": "guides"}  # repository folder -> package folder


class BuildWithHandbook(build_py):
    """The usual build, plus a copy of the handbook and of the guides as package data of pytest_dit_ar."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for source, name in COPIES.items():
            if not source.is_dir():
                continue
            dest = Path(self.build_lib) / "pytest_dit_ar" / name
            if dest.exists():
                shutil.rmtree(dest)
            shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithHandbook})
