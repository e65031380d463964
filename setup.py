"""Build hook: ship the root `handbook/` inside the package (`pytest_dit_ar/handbook/`).

Everything else about the package is declared in pyproject.toml. The handbook stays at the repository root
(program.md, SKILL.md and the tests point there); an installed wheel needs its own copy for `dit-ar search`
(pytest_dit_ar/search/location.py looks for it). An editable install reads the repository's folder instead.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HANDBOOK = Path(__file__).resolve().parent / "handbook"


class BuildWithHandbook(build_py):
    """The usual build, plus a copy of the handbook as package data of pytest_dit_ar."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False) or not HANDBOOK.is_dir():
            return
        dest = Path(self.build_lib) / "pytest_dit_ar" / "handbook"
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(HANDBOOK, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithHandbook})
