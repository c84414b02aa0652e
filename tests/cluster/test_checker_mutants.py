"""The checker's own tests are held to account: every check of checker.py (each violation it
reports, each condition and each source one report serves) fails a test of test_checker.py when
disabled. scripts/mutate_checker.py makes the mutants and runs test_checker.py against each, in
one process and one pytest session (115 mutants, about 10 s)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "mutate_checker.py"


def test_every_check_of_the_checker_fails_a_test_without_it() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
