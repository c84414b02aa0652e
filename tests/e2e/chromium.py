"""The browser tests' Chromium (loadtests.browser's): they skip where Debian's chromium and
chromium-driver are missing, except in CI (scripts/test.sh installs them)."""

from __future__ import annotations

import os

import pytest

from loadtests.browser import CHROMEDRIVER, CHROMIUM, start_chromium

__all__ = ["needs_chromium", "start_chromium"]

needs_chromium = pytest.mark.skipif(
    (CHROMIUM is None or CHROMEDRIVER is None) and os.environ.get("CI") != "true",
    reason="Debian's chromium and chromium-driver are not installed (scripts/test.sh does)",
)
