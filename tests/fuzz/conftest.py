"""Options of the fuzz tests (give tests/fuzz on the command line, so that pytest loads this
file first):
  --fuzz-seconds N     how long each target runs under atheris (default 2)
  --fuzz-seed S|random libFuzzer's seed (default fixed; `random` explores anew, and prints it)
"""

from __future__ import annotations

import pytest

DEFAULT_SECONDS = 2
DEFAULT_SEED = "20261122"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sluice-fuzz", "Sluice fuzz tests (atheris)")
    group.addoption(
        "--fuzz-seconds",
        type=int,
        default=DEFAULT_SECONDS,
        help=f"seconds each fuzz target runs (default {DEFAULT_SECONDS}; hours for a campaign)",
    )
    group.addoption(
        "--fuzz-seed",
        default=DEFAULT_SEED,
        help=f"libFuzzer seed, or 'random' (default {DEFAULT_SEED}: CI repeats its mutations)",
    )


def _option(config: pytest.Config, name: str, default: str) -> str:
    """An option of this file, or its default when pytest did not load it at start-up."""
    try:
        return str(config.getoption(name))
    except ValueError:
        return default


@pytest.fixture
def fuzz_seconds(request: pytest.FixtureRequest) -> int:
    return int(_option(request.config, "fuzz_seconds", str(DEFAULT_SECONDS)))


@pytest.fixture
def fuzz_seed(request: pytest.FixtureRequest) -> str:
    seed = _option(request.config, "fuzz_seed", DEFAULT_SEED)
    return "0" if seed == "random" else seed  # libFuzzer: 0 picks one (printed as INFO: Seed)
