"""Fixtures: the API tests' in-process gateway on a fresh data directory (credentials are made
in the tests the way `sluice auth create-key --data-dir` makes them)."""

from tests.api.conftest import data_dir, start

__all__ = ["data_dir", "start"]
