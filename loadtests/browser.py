"""Headless Chromium (Debian's chromium and chromium-driver) driven by Selenium, for the
console's benchmark and its browser tests."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")


def start_chromium(
    profile: Path, *, window: tuple[int, int] = (1280, 900), logs: bool = True
) -> Any:
    """A headless Chromium; with `logs`, its console messages (`get_log("browser")`) and
    network events (`get_log("performance")`) can be read (chromedriver then records every
    network event, a cost a benchmark leaves out)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if CHROMIUM is None or CHROMEDRIVER is None:
        raise RuntimeError("install Debian's chromium and chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    size = f"--window-size={window[0]},{window[1]}"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", size,
                 f"--user-data-dir={profile}"):  # fmt: skip
        options.add_argument(flag)
    if logs:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
