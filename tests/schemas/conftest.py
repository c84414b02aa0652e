"""The registry API suites' real gateway (one per test module) and a client of its registry."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Server, start_server

V1 = "application/vnd.schemaregistry.v1+json"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(Path(tmp_path_factory.mktemp("registry")) / "data")
    yield running
    assert running.stop() == 0


@pytest.fixture
def sr(gateway: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{gateway.url}/schema-registry", headers={"Accept": V1}) as c:
        yield c
