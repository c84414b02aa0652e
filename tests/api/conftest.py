"""Fixtures: an in-process gateway (pytest-aiohttp) on a fresh data directory per test."""

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
    """Start a gateway on `data_dir` with Settings overrides; call again after close to restart."""

    async def go(**overrides: Any) -> Client:
        overrides.setdefault("admission_target_delay_ms", 0)  # as tests/conftest.py says
        return await aiohttp_client(build_app(Settings(data_dir=data_dir, **overrides)))

    return go


@pytest.fixture
async def client(start: Start) -> Client:
    """A gateway with default settings."""
    return await start()
