"""With SLUICE_NO_SKIPS=1 (the test command's setting: it installed every tool and built every
C extension) a skip fails, at collection (importorskip) as in a test; an expected failure
stays what it is; without it a skip is a skip."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
SKIPPING = """
import pytest

def test_skips():
    pytest.skip("chromium is not installed")

@pytest.mark.xfail(reason="known", strict=True)
def test_expected_to_fail():
    raise AssertionError
"""
SKIPPING_AT_IMPORT = """
import pytest

pytest.importorskip("gateway.formats._not_built")

def test_never_collected():
    pass
"""


def run(tmp_path: Path, test: str, no_skips: bool) -> str:
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_it.py").write_text(test)
    env = {k: v for k, v in os.environ.items() if k != "SLUICE_NO_SKIPS"}
    if no_skips:
        env["SLUICE_NO_SKIPS"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout


def test_a_skip_fails_where_the_test_command_installed_everything(tmp_path: Path) -> None:
    out = run(tmp_path, SKIPPING, no_skips=True)
    assert "1 failed, 1 xfailed" in out, out
    assert "skipped where the test command installed everything: " in out
    assert "chromium is not installed" in out


def test_a_module_skipped_at_import_fails_the_collection(tmp_path: Path) -> None:
    out = run(tmp_path, SKIPPING_AT_IMPORT, no_skips=True)
    assert "Interrupted: 1 error during collection" in out, out
    assert "could not import 'gateway.formats._not_built'" in out


def test_a_skip_is_a_skip_elsewhere(tmp_path: Path) -> None:
    assert "1 skipped, 1 xfailed" in run(tmp_path, SKIPPING, no_skips=False)
    assert "1 skipped" in run(tmp_path, SKIPPING_AT_IMPORT, no_skips=False)
