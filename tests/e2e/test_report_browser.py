"""The report page rendered in headless Chromium (Debian's package; CI installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pytest_dit_ar.report.page import session_report
from pytest_dit_ar.state.ledger import LedgerRow


def _chromium() -> str | None:
    """The headless browser to render with, if one is installed."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


def test_page_renders_in_headless_chromium(state: tuple[Path, list[LedgerRow]], tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; CI must install it (apt-get install -y chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium); the HTML checks above still ran")
    root, _ = state
    page = session_report(root / "config" / "autoresearch.json")
    shot = tmp_path / "shot.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                    "--window-size=1280,2000", page.as_uri()],
                   check=True, capture_output=True, timeout=180)
    with Image.open(shot) as im:
        assert im.size == (1280, 2000)
        rgb = np.asarray(im.convert("RGB")).astype(int)
    assert rgb.std() > 20, "the screenshot is blank"
    keep_green = np.abs(rgb - np.array([0x2E, 0x8B, 0x3D])).sum(axis=2) < 30
    assert keep_green.sum() > 200, "the progress plot (its best-so-far line) is not visible in the rendered page"
