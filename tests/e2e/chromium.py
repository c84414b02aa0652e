"""Headless Chromium for the browser tests: Debian's chromium and chromium-driver, driven by
Selenium; the tests skip where they are missing, except in CI (scripts/test.sh installs them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(
    (CHROMIUM is None or CHROMEDRIVER is None) and os.environ.get("CI") != "true",
    reason="Debian's chromium and chromium-driver are not installed (scripts/test.sh does)",
)


def start_chromium(profile: Path, *, window: tuple[int, int] = (1280, 900)) -> Any:
    """A headless Chromium whose console messages (`get_log("browser")`) and network events
    (`get_log("performance")`) the test can read."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert CHROMIUM is not None and CHROMEDRIVER is not None
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    size = f"--window-size={window[0]},{window[1]}"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", size,
                 f"--user-data-dir={profile}"):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
