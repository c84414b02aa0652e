"""In-process gateways (as tests/api) for the subscription tests."""

from tests.api.conftest import client, data_dir, start

__all__ = ["client", "data_dir", "start"]
