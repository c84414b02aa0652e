"""Fixtures: one moto_server for the session, a fresh bucket per test behind a proxy that
the test can take down, and boto3 credentials in the environment (moto accepts any)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.conftest import data_dir, start
from tests.s3 import CREDENTIALS, MotoServer, S3Proxy

__all__ = ["data_dir", "start"]  # the in-process gateway of tests/api


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    server = MotoServer()
    yield server
    server.close()


@pytest.fixture
def s3_proxy(moto: MotoServer) -> Iterator[S3Proxy]:
    proxy = S3Proxy(moto.port)
    yield proxy
    proxy.close()


@pytest.fixture
def bucket(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    return moto.new_bucket()
