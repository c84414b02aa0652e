"""Fixtures: an in-process gateway on a fresh data directory, with credentials made the way
`sluice auth create-key --data-dir` makes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pytest_aiohttp import AiohttpClient

from gateway.app import build_app
from gateway.settings import Settings
from tests.api.support import Client, Start


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def start(aiohttp_client: AiohttpClient, data_dir: Path) -> Start:
    """Start a gateway on `data_dir` with Settings overrides."""

    async def go(**overrides: Any) -> Client:
        return await aiohttp_client(build_app(Settings(data_dir=data_dir, **overrides)))

    return go
